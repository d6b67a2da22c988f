"""Several named labelers on the review page: each label records its labeler, the page computes each pair's raw
agreement and Cohen's kappa on the items both labeled, lists the items two labelers disagree on as a queue, and an
adjudicator's label (journaled as one) resolves them. And the escalated item's page data: the stage that escalated
it, the stages' confidences as far as the line records them, the cascade's thresholds; the recompile view's cascade
refit and certify with the run's real paths."""

from __future__ import annotations

import json
import re
import shlex
from contextlib import contextmanager

import httpx
import pytest

from rubricforge_dspy.data.label_journal import read_journal
from rubricforge_dspy.review import ReviewInputs, ReviewServer, ReviewState
from rubricforge_dspy.review.agreement import agreement
from tests.review.conftest import STAGE_A, journal_lines, write_cascade_run
from tests.support.review_runs import write_run

IDS = ["t0", "t1", "t2", "t3", "t4"]


def open_state(tmp_path, labels=None, **more) -> ReviewState:
    data, verdicts = write_run(tmp_path, IDS)
    return ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=labels or tmp_path / "labels.jsonl",
                                    labeler="ana", audit_size=0, **more))


def test_each_labelers_last_label_counts_and_the_pair_agreement_is_cohens_kappa(tmp_path):
    state = open_state(tmp_path)
    try:
        for ident, choice in zip(IDS, ["fail", "pass", "fail", "fail", "pass"], strict=True):
            state.label(ident, choice)  # ana's first guesses
        state.label("t0", "pass")  # ana changes her mind on t0: her own label is replaced
        for ident, choice in zip(IDS, ["pass", "fail", "fail", "fail", "pass"], strict=True):
            state.label(ident, choice, labeler="bo")
        state.label("t4", "skip", labeler="bo")
        state.undo()  # bo's skip is taken back: his pass on t4 stands again
        view = state.labelers()
    finally:
        state.close()
    assert view.labels == {"ana": {"t0": 1, "t1": 1, "t2": 0, "t3": 0, "t4": 1},
                           "bo": {"t0": 1, "t1": 0, "t2": 0, "t3": 0, "t4": 1}}
    found = agreement(view.labels)
    [pair] = found.pairs
    # 4 of 5 agree; chance agreement 3/5*2/5 + 2/5*3/5 = 0.48, so kappa = (0.8 - 0.48) / 0.52
    assert (pair.a, pair.b, pair.shared, pair.agree) == ("ana", "bo", 5, 4)
    assert pair.raw == pytest.approx(0.8) and pair.kappa == pytest.approx(0.32 / 0.52)
    assert pair.kappa_low <= pair.kappa <= pair.kappa_high and pair.raw_low <= 0.8 <= pair.raw_high
    # Krippendorff's nominal alpha, by hand: n = 10 pairable values (5 pass, 5 fail), one split item gives the
    # coincidences o_01 = o_10 = 1; alpha = 1 - (n - 1) * (o_01 + o_10) / (2 * n_0 * n_1) = 1 - 9 * 2 / 50
    assert found.items == 5 and found.alpha == pytest.approx(1 - 9 * 2 / 50)
    assert view.disagreements == ["t1"]
    lines = journal_lines(tmp_path / "labels.jsonl")
    assert {line["labeler"] for line in lines} == {"ana", "bo"}


def test_kappa_is_undefined_not_zero_when_both_labelers_gave_one_label_only():
    [same] = agreement({"a": {"x": 1, "y": 1, "z": 1}, "b": {"x": 1, "y": 1, "z": 1}}).pairs
    assert same.kappa is None and same.raw == 1.0
    [opposite] = agreement({"a": {"x": 1, "y": 0}, "b": {"x": 0, "y": 1}}).pairs
    assert opposite.kappa == pytest.approx(-1.0) and opposite.raw == 0.0


def test_an_adjudication_resolves_a_disagreement_is_journaled_as_one_and_survives_a_restart(tmp_path):
    labels = tmp_path / "labels.jsonl"
    state = open_state(tmp_path, labels)
    try:
        state.label("t2", "pass")
        state.label("t2", "fail", labeler="bo")
        state.label("t3", "pass")
        state.label("t3", "pass", labeler="bo")
        assert state.labelers().disagreements == ["t2"]
        state.label("t2", "fail", labeler="cy", adjudication=True)
        view = state.labelers()
    finally:
        state.close()
    assert view.disagreements == [] and view.adjudicated == {"t2": 0}
    assert set(view.labels) == {"ana", "bo"}  # the adjudicator's label is a resolution, not a third opinion
    last = journal_lines(labels)[-1]
    assert last["adjudication"] is True and last["labeler"] == "cy" and last["label"] == 0
    assert read_journal(labels).entries["t2"].label == 0  # any --labels reader: the resolution is the last line
    state = open_state(tmp_path, labels)  # a new page on the same file knows it was an adjudication
    try:
        assert state.labelers().adjudicated == {"t2": 0} and state.labelers().disagreements == []
    finally:
        state.close()


@contextmanager
def client(server):
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60) as c:
        assert c.get(f"/?token={server.token}").status_code == 303
        yield c


def test_the_page_labels_under_the_typed_name_shows_the_agreement_and_queues_the_disagreement(tmp_path):
    hostile = "eve\u202e<b>x</b>"
    state = open_state(tmp_path)
    server = ReviewServer(state)
    server.start()
    try:
        with client(server) as c:
            csrf = server.app.state.guard.csrf
            for index, choice in ((0, "pass"), (1, "pass")):
                assert c.post("/label", data={"index": index, "choice": choice, "csrf": csrf}).status_code == 303
            for index, choice in ((0, "pass"), (1, "fail")):
                answer = c.post("/label", data={"index": index, "choice": choice, "csrf": csrf, "labeler": hostile})
                assert answer.status_code == 303
            queue = c.get("/").text
            item = c.get("/item/1").text  # the labeler cookie: the form is filled with the last name typed
            disagreements = c.get("/?group=disagreements").text
            adjudicated = c.post("/label", data={"index": 1, "choice": "fail", "csrf": csrf, "labeler": "cy",
                                                 "adjudication": "1"})
            after = c.get("/?group=disagreements").text
    finally:
        server.stop()
    lines = journal_lines(tmp_path / "labels.jsonl")
    assert [line["labeler"] for line in lines] == ["ana", "ana", hostile, hostile, "cy"]
    assert adjudicated.status_code == 303 and lines[-1]["adjudication"] is True
    pairs = re.search(r'<table class="agreement-pairs".*?</table>', queue, re.S)[0]
    assert "\u202e" not in queue and "<b>x</b>" not in queue and "eve\\u202e&lt;b&gt;x&lt;/b&gt;" in pairs
    assert "1 of 2 (0.50" in pairs and "2 disagreement" not in queue and "1 disagreement(s) to adjudicate" in queue
    field = re.search(r'<input name="labeler" id="labeler"[^>]*>', item)[0]
    assert "\u202e" not in item and "<b>x</b>" not in item and 'value="eve' in field
    assert 'id="disagreement"' in item and 'id="adjudicate-form"' in item
    rows = re.findall(r'<td class="id"><a href="[^"]*">(?:<bdi[^>]*>)?([^<]*)', disagreements)
    assert rows == ["t1"]
    assert re.findall(r'<td class="id"><a href="[^"]*">(?:<bdi[^>]*>)?([^<]*)', after) == []


def test_an_escalated_items_data_name_its_stage_confidences_and_the_cascades_thresholds(tmp_path):
    data, verdicts, cascade = write_cascade_run(tmp_path)
    state = ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="ana"))
    try:
        index = state.verdicts.position["i3"]
        item = state.item(index)
        decided = state.item(state.verdicts.position["i1"])
        commands = state.commands()
        audit = state.audit_status()
    finally:
        state.close()
    escalation = item["escalation"]
    assert decided["escalation"] is None
    assert escalation["escalated_by"] == "tool-b" and escalation["confidence"] == pytest.approx(0.6)
    assert escalation["cascade_file"] == str(cascade)
    rows = {row["name"]: row for row in escalation["stages"]}
    assert list(rows) == [STAGE_A, "tool-b"]
    assert (rows[STAGE_A]["t_fail"], rows[STAGE_A]["t_pass"]) == (0.1, 0.9)
    assert (rows["tool-b"]["t_fail"], rows["tool-b"]["t_pass"]) == (0.2, 0.8)
    assert rows["tool-b"]["escalating"] and rows["tool-b"]["confidence"] == pytest.approx(0.6)
    assert rows[STAGE_A]["confidence"] is None  # not on the line: said so, not made up
    assert any("not the confidences of the stages before it" in note for note in escalation["notes"])
    refit, certify = commands[0]["command"], commands[1]["command"]
    words = shlex.split(refit)
    assert words[:3] == ["rubricforge", "cascade", "fit"]
    assert [words[k + 1] for k, w in enumerate(words) if w == "--stage"] == [
        str(tmp_path / f"cascade.{STAGE_A}.json"), str(tmp_path / "cascade.tool-b.json")]
    assert words[words.index("--labels") + 1] == str(tmp_path / "l.jsonl")
    assert words[words.index("--data") + 1] == str(data)
    out = words[words.index("--out") + 1]
    assert shlex.split(certify) == ["rubricforge", "certify", out, "--data", str(data), "--labels",
                                    str(tmp_path / "l.jsonl")]
    assert audit is not None and f"{audit['items']} items labeled" in commands[0]["what"]
    assert not any("PROGRAM.json" in c["command"] or "STAGE..." in c["command"] for c in commands)


def test_the_escalated_items_page_shows_the_stage_and_the_thresholds_escaped(tmp_path):
    data, verdicts, _ = write_cascade_run(tmp_path)
    state = ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="ana"))
    index = state.verdicts.position["i0"]
    server = ReviewServer(state)
    server.start()
    try:
        with client(server) as c:
            page = c.get(f"/item/{index}").text
            commands = c.get("/commands").text
    finally:
        server.stop()
    assert "\u202e" not in page and "\u202e" not in commands
    assert re.search(r'id="escalated-by"><bdi[^>]*>tool-b</bdi>', page)
    table = re.search(r'<table class="stages" id="stages">.*?</table>', page, re.S)[0]
    assert "tool-a" in table and "0.100" in table and "0.900" in table and "0.200" in table
    assert "0.800" in table and "0.500" in table and "(escalated it)" in table
    assert "cascade fit --stage" in commands and "tool-a" in commands


def test_a_verdict_file_without_a_cascade_record_says_the_thresholds_are_unknown(tmp_path):
    data, verdicts = write_run(tmp_path, ["e0"], stage="escalated", escalated_by="floor", score_calibrated=0.4)
    lines = [json.loads(x) for x in verdicts.read_text().splitlines()]
    state = ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "l.jsonl", labeler="a",
                                     audit_size=0))
    try:
        escalation = state.item(0)["escalation"]
    finally:
        state.close()
    assert lines[0]["stage"] == "escalated"
    assert escalation["escalated_by"] == "floor" and escalation["confidence"] == 0.4
    assert [row["name"] for row in escalation["stages"]] == ["floor"] and not escalation["stages"][0]["known"]
    assert any("thresholds are not known" in note for note in escalation["notes"])
