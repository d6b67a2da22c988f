"""The review page in a real browser: Debian's Chromium, headless, driven by Selenium through chromedriver.

Label three items with the keyboard, undo one, reload and find the progress kept, read the labels file
back through the package's readers; open every item of an adversarial corpus and find that nothing ran,
no dialog opened, and no payload became an element of the page. Screenshots go to
``$RUBRICFORGE_TEST_ARTIFACTS`` (else the test's temporary directory).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from rubricforge_dspy.data.label_journal import read_journal
from tests.review.conftest import journal_lines, start

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} not found: apt-get install {package}"
    return None


pytestmark = [pytest.mark.skipif(_missing() is not None, reason=_missing() or ""), pytest.mark.slow]


@pytest.fixture
def artifacts(tmp_path) -> Path:
    directory = Path(os.environ.get("RUBRICFORGE_TEST_ARTIFACTS") or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 30, poll_frequency=0.05).until(condition, message=what)


def _item_id(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, "item-id").text


def _press(driver, key: str, *, leaving: str | None = None) -> None:
    """Press `key` on the page; when it navigates, wait until the page showing item `leaving` is gone."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    old = driver.find_element(By.TAG_NAME, "body")
    ActionChains(driver).send_keys(key).perform()
    if leaving is not None:
        from selenium.webdriver.support import expected_conditions as EC

        _wait(driver, EC.staleness_of(old), f"the page to change after pressing {key!r}")
        _wait(driver, lambda d: d.execute_script("return document.readyState") == "complete", "the next page")


def _no_alert(driver) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        _alert = driver.switch_to.alert  # the property raises when no alert is open
    except NoAlertPresentException:
        return True
    return False


def test_label_three_items_with_the_keyboard_undo_one_and_keep_the_progress(browser, demo_inputs, artifacts):
    from selenium.webdriver.common.by import By

    server = start(demo_inputs)
    try:
        browser.get(server.url)  # ?token=... sets the cookie and redirects to the queue
        assert "token=" not in browser.current_url
        assert browser.find_element(By.ID, "progress").text.startswith("0 of 4 labeled")
        browser.save_screenshot(str(artifacts / "review-queue.png"))
        browser.find_element(By.ID, "start").click()
        _wait(browser, lambda d: d.find_elements(By.ID, "item-id"), "the first item")
        labeled = []
        for key in ("p", "f", "p"):
            labeled.append(_item_id(browser))
            _press(browser, key, leaving=labeled[-1])
        assert browser.find_element(By.ID, "progress").text.startswith("3 of 4 labeled")
        browser.save_screenshot(str(artifacts / "review-item.png"))
        _press(browser, "u", leaving=_item_id(browser))  # undo: back to the third item, unlabeled again
        assert _item_id(browser) == labeled[2]
        assert "none yet" in browser.find_element(By.ID, "current-label").text
        _press(browser, "k", leaving=labeled[2])  # previous: the second item, labeled fail
        assert _item_id(browser) == labeled[1] and "fail" in browser.find_element(By.ID, "current-label").text
        _press(browser, "j", leaving=labeled[1])
        assert _item_id(browser) == labeled[2]
        browser.refresh()
        assert browser.find_element(By.ID, "progress").text.startswith("2 of 4 labeled")
        assert _no_alert(browser)
        browser.get(f"http://127.0.0.1:{server.port}/judge")  # the figures load as pictures, under the CSP
        images = browser.find_elements(By.CSS_SELECTOR, "figure img")
        assert len(images) >= 4 and all(browser.execute_script("return arguments[0].complete && "
                                                               "arguments[0].naturalWidth > 0", i) for i in images)
        assert "Goal fulfilled" in browser.find_element(By.CSS_SELECTOR, "ol.criteria").text
        browser.save_screenshot(str(artifacts / "review-judge.png"))
    finally:
        server.stop()
    server = start(demo_inputs)  # a new run of the page reads the same journal back
    try:
        browser.get(server.url)
        assert browser.find_element(By.ID, "progress").text.startswith("2 of 4 labeled")
    finally:
        server.stop()
    lines = journal_lines(demo_inputs.labels_out)
    assert [(l["id"], l["label"], l["undo"]) for l in lines] == [
        (labeled[0], 1, False), (labeled[1], 0, False), (labeled[2], 1, False), (labeled[2], None, True)]
    resolved = read_journal(demo_inputs.labels_out)
    assert {k: e.label for k, e in resolved.entries.items()} == {labeled[0]: 1, labeled[1]: 0}
    assert resolved.blank == [labeled[2]]


def test_the_adversarial_corpus_runs_nothing_in_the_browser(browser, tmp_path, artifacts):
    from selenium.webdriver.common.by import By

    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
    from rubricforge_dspy.review import ReviewInputs
    from tests.support.review_corpus import PAYLOADS, write_corpus

    data, verdicts = write_corpus(tmp_path)
    trajectories = {t.id: t for t in load_trajectories(data)}
    server = start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="t"))
    try:
        browser.get(server.url)
        assert _no_alert(browser) and browser.execute_script("return window.__pwned === undefined")
        assert not browser.find_elements(By.CSS_SELECTOR, "table.queue b, table.queue script")
        browser.save_screenshot(str(artifacts / "adversarial-queue.png"))
        seen = 0
        for index in range(len(PAYLOADS)):
            browser.get(f"http://127.0.0.1:{server.port}/item/{index}")
            assert _no_alert(browser), f"item {index} opened a dialog"
            assert browser.execute_script("return window.__pwned === undefined"), f"item {index} ran script"
            evidence = browser.find_element(By.ID, "evidence")
            assert not evidence.find_elements(By.CSS_SELECTOR, "*:not(span)"), f"item {index}: markup got in"
            assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img, main iframe, main svg, "
                                                              "main style, main object, #evil-link, main meta")
            assert evidence.is_displayed() and browser.find_element(By.TAG_NAME, "body").is_displayed()
            # the payloads are on the page as text: exactly what the judge read, and the reason as written
            trajectory = trajectories[server.state.verdicts.ids[index]]
            assert evidence.get_attribute("textContent") == render_trajectory(trajectory, RenderConfig())
            reason = browser.find_element(By.CSS_SELECTOR, "td.reason").get_attribute("textContent")
            assert reason == f"criterion 1 {PAYLOADS[index]}"
            seen += 1
            if index in (0, 1):
                browser.save_screenshot(str(artifacts / f"adversarial-item-{index}.png"))
        assert seen == len(PAYLOADS)
        errors = [entry for entry in browser.get_log("browser") if "pwned" in entry.get("message", "")]
        assert errors == [] or all("Content Security Policy" in e["message"] for e in errors)
    finally:
        server.stop()


def _evidence_of_every_item(driver, server) -> dict[str, tuple[str, bool]]:
    """id -> (the text under "What the judge read", whether the page warns that it may not be the judge's)."""
    from selenium.webdriver.common.by import By

    shown = {}
    for index, ident in enumerate(server.state.verdicts.ids):
        driver.get(f"http://127.0.0.1:{server.port}/item/{index}")
        assert _item_id(driver) == ident
        shown[ident] = (driver.find_element(By.ID, "evidence").get_attribute("textContent"),
                        bool(driver.find_elements(By.ID, "render-warning")))
    return shown


def test_what_the_judge_read_equals_rubricforge_render_with_the_judging_programs_preset(browser, tmp_path):
    """The issue's test: on a run made with `rubricforge judge` (a scripted LM over HTTP), "What the judge read"
    is `rubricforge render` with the judging program's render on every item, whether the page is given the
    --program or not; and a run judged without a program under the embedded preset shows `rubricforge render
    --preset embedded` with no --program either. None of these is the default render (22,000 tokens), which is
    what the page showed for a run it was given no --program for."""
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
    from rubricforge_dspy.review import ReviewInputs
    from tests.support.review_runs import DEMO_DATA, PROGRAM, data_index, judge, rendered, verdict_ids

    where = data_index()
    trajectories = {t.id: t for t in load_trajectories(DEMO_DATA)}
    runs = [(judge(tmp_path / "with-program.jsonl", "--program", str(PROGRAM)), ("--program", str(PROGRAM)),
             [None, PROGRAM]),
            (judge(tmp_path / "embedded.jsonl", "--preset", "embedded"), ("--preset", "embedded"), [None])]
    for verdicts, render_options, page_programs in runs:
        expected = {ident: rendered(where[ident], *render_options) for ident in verdict_ids(verdicts)}
        assert any(text != render_trajectory(trajectories[ident], RenderConfig()) for ident, text in expected.items())
        for program in page_programs:
            server = start(ReviewInputs(data=[DEMO_DATA], verdicts=verdicts, labels_out=tmp_path / "l.jsonl",
                                        labeler="t", program=program))
            try:
                browser.get(server.url)
                shown = _evidence_of_every_item(browser, server)
            finally:
                server.stop()
            assert {ident: text for ident, (text, _) in shown.items()} == expected, (verdicts.name, program)
            assert not any(warned for _, warned in shown.values()), (verdicts.name, program)


def test_bidi_text_does_not_reverse_the_pages_sentences_and_a_long_id_wraps(browser, tmp_path):
    """An id holding a right-to-left override (U+202E) sits inside two of the page's own sentences: the red
    banner of a label the sink did not take, and the line naming the whole trajectory. The words after it read
    left to right (their first letter left of their last), the override is shown as ``\\u202e``; a 3,000-character
    id wraps in the queue and on the item instead of widening the page."""
    from selenium.webdriver.common.by import By

    from rubricforge_dspy.review import ReviewInputs, ReviewServer, ReviewState
    from tests.support.review_runs import write_run

    long_id = "trajectory-" + "x" * 3000
    data, verdicts = write_run(tmp_path, ["abc\u202edef-1", long_id, "plain"])

    def refuse(line):
        raise ConnectionError("MLflow unreachable")

    state = ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="t"),
                        on_label=refuse, sink_name="MLflow")
    server = ReviewServer(state)
    server.start()
    try:
        browser.get(server.url)
        wide = "return document.documentElement.scrollWidth <= window.innerWidth + 1"
        assert browser.execute_script(wide), "the queue is wider than the window"
        browser.get(f"http://127.0.0.1:{server.port}/item/1")
        assert browser.execute_script(wide), "the item page is wider than the window"
        browser.get(f"http://127.0.0.1:{server.port}/item/0")
        _press(browser, "p", leaving="abc")  # the sink refuses: the banner names the id
        browser.get(f"http://127.0.0.1:{server.port}/item/0")
        in_order = """
            const [element, word] = arguments;
            const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
              const at = node.data.indexOf(word);
              if (at < 0) continue;
              const box = (i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
                                   return r.getBoundingClientRect(); };
              return box(at).left < box(at + word.length - 1).left;
            }
            return null;"""
        banner = browser.find_element(By.ID, "sink-error")
        assert "abc\\u202edef-1" in banner.text
        for word in ("They", "kept", "answers"):
            assert browser.execute_script(in_order, banner, word) is True, f"{word!r} reads right to left"
        line = browser.find_element(By.ID, "render-source")
        assert "abc\\u202edef-1" in line.text
        for word in ("steps", "unclipped"):
            assert browser.execute_script(in_order, line, word) is True, f"{word!r} reads right to left"
    finally:
        server.stop()


def test_the_audit_queue_is_shown_and_its_labels_are_journaled_as_the_audit_sample(browser, tmp_path, artifacts):
    """Beside the escalated queue, the page proposes the audit sample (drawn at start, recorded beside the labels
    file); a label given there is journaled with ``sample: "audit"`` and the draw's digest, one given elsewhere
    with ``sample: "other"`` (issue 39, item 6)."""
    from dataclasses import replace

    from selenium.webdriver.common.by import By

    from rubricforge_dspy.review import ReviewInputs
    from rubricforge_dspy.trust.label_next import read_audit
    from tests.review.conftest import DEMO_DATA, DEMO_PROGRAM, DEMO_RUN, DEMO_VERDICTS

    labels = tmp_path / "labels.jsonl"
    inputs = ReviewInputs(data=[DEMO_DATA], verdicts=DEMO_VERDICTS, labels_out=labels, labeler="tester",
                          program=DEMO_PROGRAM, run_dir=DEMO_RUN, allow_unverified_program=True, audit_size=1,
                          audit_seed=3)
    server = start(inputs)
    try:
        draw = read_audit(f"{labels}.audit.json")  # recorded at start, before any label
        assert len(draw.units) == 1 and draw.decided and draw.seed == 3
        browser.get(server.url)
        notice = browser.find_element(By.ID, "audit").text
        assert "audit queue" in notice and f"draw {draw.digest[:12]}" in notice and "seed 3" in notice
        browser.find_element(By.ID, "audit-link").click()
        _wait(browser, lambda d: "group=audit" in d.current_url, "the audit queue")
        rows = browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")
        assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == ["audit"] * len(draw.decided)
        assert sorted(r.find_element(By.CSS_SELECTOR, "td.id a").text for r in rows) == sorted(draw.decided)
        browser.save_screenshot(str(artifacts / "review-audit-queue.png"))
        browser.find_element(By.ID, "start").click()
        _wait(browser, lambda d: d.find_elements(By.ID, "item-id"), "the first audit item")
        audited = _item_id(browser)
        _press(browser, "f", leaving=audited)
        other = next(i for i in server.state.verdicts.ids if i not in draw.ids)
        browser.get(server.url.split("?")[0].rstrip("/") + f"/item/{server.state.verdicts.position[other]}")
        _wait(browser, lambda d: _item_id(d) == other, "an item outside the audit sample")
        _press(browser, "p", leaving=other)
    finally:
        server.stop()
    lines = journal_lines(labels)
    assert [(x["id"], x["label"], x["sample"], x.get("audit")) for x in lines] == [
        (audited, 0, "audit", draw.digest), (other, 1, "other", None)]
    server = start(replace(inputs, audit_size=5))  # a second session keeps the recorded draw, whatever it is asked
    try:
        assert server.state.audit == draw
    finally:
        server.stop()


def test_two_labelers_agreement_the_disagreement_queue_and_the_escalated_items_stages(browser, tmp_path, artifacts):
    """In headless Chromium: an escalated item of a real cascade run shows the stage that escalated it and every
    stage's thresholds (names escaped); two labelers (the second typed on the page) label two items, the queue shows
    their raw agreement and kappa and one disagreement, whose queue holds that item; an adjudicator resolves it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    from rubricforge_dspy.review import ReviewInputs
    from tests.review.conftest import write_cascade_run

    data, verdicts, _ = write_cascade_run(tmp_path)
    labels = tmp_path / "labels.jsonl"
    server = start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=labels, labeler="ana", audit_size=0))
    base = f"http://127.0.0.1:{server.port}"
    try:
        position = server.state.verdicts.position
        browser.get(server.url)
        browser.get(f"{base}/item/{position['i0']}")
        assert browser.find_element(By.ID, "escalated-by").text == "tool-b"
        stages = browser.find_element(By.ID, "stages").text
        assert "tool-a" in stages
        assert "0.100" in stages and "0.900" in stages and "0.200" in stages and "0.800" in stages
        assert "tool-b (escalated it)" in stages and "0.500" in stages
        browser.save_screenshot(str(artifacts / "review-escalated.png"))

        def label(ident: str, key: str, labeler: str | None = None) -> None:
            browser.get(f"{base}/item/{position[ident]}")
            if labeler is None:
                _press(browser, key, leaving=ident)
                return
            field = browser.find_element(By.ID, "labeler")
            field.clear()
            field.send_keys(labeler)
            old = browser.find_element(By.TAG_NAME, "body")
            browser.find_element(By.ID, "btn-pass" if key == "p" else "btn-fail").click()
            _wait(browser, EC.staleness_of(old), "the page after the label")

        label("i0", "p")
        label("i3", "p")
        label("i0", "f", labeler="bo")  # typed on the page: kept for the next label
        browser.get(f"{base}/item/{position['i3']}")
        assert browser.find_element(By.ID, "labeler").get_attribute("value") == "bo"
        label("i3", "p")
        browser.get(f"{base}/")
        pairs = browser.find_element(By.ID, "agreement-pairs").text
        assert "ana · bo" in pairs and "1 of 2 (0.50" in pairs
        kappa = browser.find_elements(By.CSS_SELECTOR, "#agreement-pairs tr.pair td")[3].text
        assert kappa.split()[0] == "0.00"  # ana passed both: chance agreement 0.5, kappa (0.5 - 0.5) / 0.5
        assert browser.find_element(By.ID, "alpha").text.startswith("Krippendorff's alpha over all labelers, on the 2")
        link = browser.find_element(By.ID, "disagreements-link")
        assert link.text.startswith("1 disagreement")
        browser.save_screenshot(str(artifacts / "review-agreement.png"))
        link.click()
        _wait(browser, lambda d: "group=disagreements" in d.current_url, "the disagreement queue")
        rows = browser.find_elements(By.CSS_SELECTOR, "#queue tbody td.id a")
        assert [row.text for row in rows] == ["i0"]
        rows[0].click()
        _wait(browser, lambda d: d.find_elements(By.ID, "adjudicate-form"), "the disagreement's item")
        assert "they disagree" in browser.find_element(By.ID, "labelers").text
        field = browser.find_element(By.ID, "adjudicator")
        field.clear()
        field.send_keys("cy")
        old = browser.find_element(By.TAG_NAME, "body")
        browser.find_element(By.ID, "adj-pass").click()
        _wait(browser, EC.staleness_of(old), "the page after the adjudication")
        browser.get(f"{base}/")
        assert browser.find_element(By.ID, "disagreements").text == "No open disagreement between labelers."
        assert _no_alert(browser)
    finally:
        server.stop()
    lines = journal_lines(labels)
    assert [(l["id"], l["labeler"], l["label"], l.get("adjudication", False)) for l in lines] == [
        ("i0", "ana", 1, False), ("i3", "ana", 1, False), ("i0", "bo", 0, False), ("i3", "bo", 1, False),
        ("i0", "cy", 1, True)]
