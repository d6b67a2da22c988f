"""Untrusted text on the review pages, over real HTTP: bidi and control characters in every field reach no
page (shown as escapes), look-alike ids are marked, figure names with ``#``, ``?``, ``%`` load, a bad
``run.json`` is a message on the judge page, and the whole trajectory is shown unclipped, in pages, escaped."""

from __future__ import annotations

import html
import json
import re
import unicodedata
from contextlib import contextmanager

import httpx

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.review import ReviewInputs, ReviewServer, ReviewState
from tests.review.conftest import start
from tests.support.review_runs import write_run

# bidi overrides, embeddings and isolates, a mark, zero-width characters, C0 and C1 controls, separators
HOSTILE = "\u202e\u202d\u202a\u202b\u202c\u2066\u2067\u2068\u2069\u200f\u200b\u200d\ufeff\x1b[2J\x07\x85\x9b\u2028"


@contextmanager
def client(server):
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as c:
        assert c.get(f"/?token={server.token}").status_code == 303
        yield c


def _hidden(text: str) -> list[str]:
    """The characters of `text` that could reorder or hide text: controls (but line breaks and tabs), format
    characters, line and paragraph separators."""
    return sorted({f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")
                   and ch not in "\n\t"})


def test_bidi_and_control_characters_in_every_field_reach_no_page(tmp_path):
    """Ids, task, agent, stage, reason, the labeler, a note, the verdict file's name, a criterion
    name, a candidate, a figure name and the trajectory's steps all carry bidi and control characters: no page
    holds one (each is shown as its escape, e.g. ``\\u202e``)."""
    run = tmp_path / f"run{HOSTILE}"
    (run / "gepa").mkdir(parents=True)
    (run / "figures").mkdir()
    (run / "figures" / f"fig{HOSTILE}.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (run / "gepa" / "candidates.json").write_text(json.dumps([f"1. Goal{HOSTILE}: the goal is met", "2. other"]))
    (run / "run.json").write_text(json.dumps({"sweep": [{"candidate": 0, "val_score": 0.5, "parents": [HOSTILE]}]}))
    ids = [f"id-{n}{HOSTILE}" for n in range(3)]
    data, verdicts = write_run(tmp_path, ids, tasks=[f"task{HOSTILE}"] * 3,
                               contents=[f"user says {HOSTILE} here"] * 3, agent=f"agent{HOSTILE}",
                               reason=f"criterion 1 {HOSTILE}", stage=f"stage{HOSTILE}")
    named = verdicts.with_name(f"verdicts{HOSTILE}.jsonl")
    verdicts.rename(named)
    server = start(ReviewInputs(data=[data], verdicts=named, labels_out=tmp_path / "l.jsonl",
                                labeler=f"ana{HOSTILE}", run_dir=run))
    try:
        with client(server) as c:
            csrf = server.app.state.guard.csrf
            assert c.post("/label", data={"index": "0", "choice": "pass", "note": f"note{HOSTILE}",
                                          "csrf": csrf}).status_code == 303
            pages = {path: c.get(path) for path in ("/", "/item/0", "/item/1", "/item/0/trajectory", "/judge",
                                                    "/commands", "/?task=task")}
    finally:
        server.stop()
    for path, page in pages.items():
        assert page.status_code == 200, path
        assert _hidden(page.text) == [], path
    item = html.unescape(pages["/item/0"].text)
    assert "id-0\\u202e\\u202d" in item and "note\\u202e" in item and "ana\\u202e" in item
    assert "user says \\u202e" in html.unescape(pages["/item/0/trajectory"].text)
    assert "fig\\u202e" in html.unescape(pages["/judge"].text)


def test_look_alike_ids_are_marked_both_of_them(tmp_path):
    """Ids that differ only by a Cyrillic letter, a zero-width space, a digit for a letter or case are marked on
    the queue, and each item names the others with their code points; an id like no other is not marked."""
    ids = ["order-a", "order-\u0430", "ORDER-A", "ord\u200ber-b", "order-b", "order-10", "order-1o", "unique"]
    data, verdicts = write_run(tmp_path, ids)
    server = start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="t"))
    try:
        with client(server) as c:
            queue = c.get("/").text
            rows = re.findall(r'<td class="id">(.*?)</td>', queue, re.S)
            marked = {html.unescape(re.search(r"<bdi[^>]*>(.*?)</bdi>", row)[1]) for row in rows
                      if 'class="lookalike"' in row}
            first = html.unescape(c.get(f"/item/{server.state.verdicts.position['order-a']}").text)
    finally:
        server.stop()
    assert marked == {"order-a", "order-\u0430", "ORDER-A", "ord\\u200ber-b", "order-b", "order-10", "order-1o"}
    assert "This id reads like 2 other id(s) in this file" in first
    assert "<code>order-\\u0430</code>" in first and "<code>ORDER-A</code>" in first


def test_figure_names_with_hash_question_mark_and_percent_load(tmp_path):
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    names = ["a#b", "c?d", "50%", "e%2Ff", "x y", "plain"]
    for number, name in enumerate(names):
        (run / "figures" / f"{name}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([number]))
    data, verdicts = write_run(tmp_path, ["t1"])
    server = start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="t",
                                run_dir=run))
    try:
        with client(server) as c:
            sources = re.findall(r'<img src="([^"]+)"', c.get("/judge").text)
            assert len(sources) == len(names)
            got = {}
            for source in sources:
                answer = c.get(html.unescape(source))
                assert answer.status_code == 200 and answer.headers["content-type"] == "image/png", source
                got[answer.content[-1]] = source
            assert sorted(got) == list(range(len(names)))  # each link loads its own figure
            assert c.get("/figure/nothing").status_code == 404
            assert c.get("/figure/..%2Frun.json").status_code == 404
            assert c.get("/figure/%2E%2E/%2E%2E/data.jsonl").status_code == 404
    finally:
        server.stop()


def test_a_bad_run_json_is_a_message_on_the_judge_page(tmp_path):
    data, verdicts = write_run(tmp_path, ["t1"])
    candidates = json.dumps(["1. Goal: met", "1. Goal: met, checked"])
    bad = {"not JSON": "{sweep: [", "a list": "[1, 2]", "sweep not a list": '{"sweep": {"candidate": 0}}',
           "wrong types": json.dumps({"sweep": [{"candidate": 0, "val_score": "high", "val_agreement": [1],
                                                 "parents": "none", "discovered_at_metric_call": "x"}, 7]}),
           "not UTF-8": b"\xff\xfe{".decode("latin-1"), "a directory": None}
    for number, (what, text) in enumerate(bad.items()):
        run = tmp_path / f"run{number}"
        (run / "gepa").mkdir(parents=True)
        (run / "gepa" / "candidates.json").write_text(candidates)
        if text is None:
            (run / "run.json").mkdir()
        elif what == "not UTF-8":
            (run / "run.json").write_bytes(b"\xff\xfe{")
        else:
            (run / "run.json").write_text(text)
        server = start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / f"l{number}.jsonl",
                                    labeler="t", run_dir=run))
        try:
            with client(server) as c:
                page = c.get("/judge")
        finally:
            server.stop()
        assert page.status_code == 200, what
        notes = [html.unescape(n) for n in re.findall(r'<p class="warn run-note">(.*?)</p>', page.text, re.S)]
        assert any(f"{run / 'run.json'}:" in note for note in notes), (what, notes)
        assert "candidate 1" in page.text, what  # the candidates are still shown


def test_the_whole_trajectory_is_shown_unclipped_in_pages_and_escaped(tmp_path):
    """A trajectory with a 250,000-character step: the judge read a clipped render; the trajectory view shows
    every character of every step, over pages, with markup inert."""
    long_text = "<script>window.__pwned=1</script>" + "".join(f"line {n}: {'x' * 90}\n" for n in range(2500))
    data, verdicts = write_run(tmp_path, ["long"], contents=[long_text])
    server = start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="t"))
    trajectory = load_trajectories(data)[0]
    try:
        with client(server) as c:
            item = c.get("/item/0").text
            assert 'href="/item/0/trajectory"' in item
            texts, page, pages = [], 1, None
            while True:
                answer = c.get(f"/item/0/trajectory?page={page}")
                assert answer.status_code == 200 and "<script>window" not in answer.text
                pages = int(re.search(r"Page \d+ of (\d+)", answer.text)[1])
                texts += [html.unescape(t) for t in re.findall(r'<pre class="steptext u" dir="ltr">(.*?)</pre>',
                                                               answer.text, re.S)]
                if page == pages:
                    break
                assert f'href="/item/0/trajectory?page={page + 1}"' in answer.text
                page += 1
            assert c.get("/item/9/trajectory").status_code == 404
    finally:
        server.stop()
    assert pages >= 3
    assert "".join(texts).startswith(long_text.rstrip("\n")) or long_text.rstrip("\n") in "".join(texts)
    assert len(render_trajectory(trajectory, RenderConfig())) < len(long_text)  # the judge read less
    assert "Your flight is booked." in "".join(texts)


def test_the_sink_banner_holds_the_id_as_an_escape(tmp_path):
    data, verdicts = write_run(tmp_path, ["a\u202eb"])

    def refuse(line):
        raise ConnectionError("down")

    server = ReviewServer(ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl",
                                                   labeler="t"), on_label=refuse, sink_name="MLflow"))
    server.start()
    try:
        with client(server) as c:
            posted = c.post("/label", data={"index": "0", "choice": "pass", "csrf": server.app.state.guard.csrf})
            # the page answers once the line is in the file and queued for the sender (so the wait below cannot
            # pass before the line was queued); the sender runs in the background: wait for its record of the
            # failed send (an explicit signal, a generous bound, no sleep), then read the page that shows it
            assert posted.status_code == 303, posted.text
            assert server.state.wait_for_sink(timeout=120), "the background sender never finished the label"
            assert server.state.sink.failed == 1 and server.state.sink.failed_ids == ["a\u202eb"]
            banner = re.search(r'<div class="sink-error" id="sink-error"[^>]*>(.*?)</div>', c.get("/").text, re.S)[1]
    finally:
        server.stop()
    assert "\u202e" not in banner and 'last: <bdi dir="ltr" class="u">a\\u202eb</bdi>' in banner
