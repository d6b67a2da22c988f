"""The command-line round trip of the page's labels: a labels journal written through the review page's HTTP
endpoint (labels, changed minds, skips, an undo) is read by ``rubricforge certify --labels`` and
``rubricforge induce --init P --labels L`` (scripted LMs, `scripted_cli`), and the labels they use are the
last line of each id: the labeled set's size and its pass/fail counts say so."""

from __future__ import annotations

import ast
import dataclasses
import json
import re

import httpx
import pytest

pytest.importorskip("dspy", reason="induction needs DSPy (./install.sh)")
pytestmark = pytest.mark.slow  # a GEPA run with scripted LMs and a certification: several seconds

from rubricforge_dspy.cli.main import main  # noqa: E402
from rubricforge_dspy.data.export import convert_trajectories  # noqa: E402
from rubricforge_dspy.data.label_journal import read_journal  # noqa: E402
from rubricforge_dspy.judge.loading import load_judge  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.program.store import freeze, read_program  # noqa: E402
from rubricforge_dspy.review import ReviewInputs  # noqa: E402
from tests.review.conftest import journal_lines, start  # noqa: E402
from tests.support.helpers import make_dataset  # noqa: E402

N = 30


def label_through_the_page(inputs, truth) -> None:
    """What a person does on the page, over HTTP with the token cookie and the CSRF token: items 0-9 first
    labeled pass (wrong for the failed ones) then changed to the truth, 10-25 labeled right, 26-27 skipped,
    28 labeled then undone, 29 never touched."""
    server = start(inputs)
    try:
        csrf = server.app.state.guard.csrf
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", follow_redirects=False, timeout=60) as c:
            assert c.get(f"/?token={server.token}").status_code == 303

            def post(k: int, choice: str, note: str = "") -> None:
                index = server.state.verdicts.position[truth[k].id]
                answer = c.post("/label", data={"index": str(index), "choice": choice, "note": note, "csrf": csrf})
                assert answer.status_code == 303, answer.text

            def right(k: int) -> str:
                return "pass" if truth[k].label else "fail"

            for k in range(10):
                post(k, "pass", "first look")
            for k in range(10):
                post(k, right(k), "checked the tool results")  # a changed mind where the first look was wrong
            for k in range(10, 26):
                post(k, right(k))
            post(26, "skip")
            post(27, "skip")
            post(28, right(28))
            assert c.post("/undo", data={"csrf": csrf}).status_code == 303
            assert "26 of 30 labeled" in c.get("/").text
    finally:
        server.stop()


@pytest.fixture
def journal(tmp_path):
    truth = make_dataset(N)  # even i passes, odd i fails
    data = tmp_path / "data.jsonl"
    convert_trajectories([dataclasses.replace(t, label=None, reward=None) for t in truth], data)
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": t.id, "passed": True, "score": 0.9, "abstained": False,
                                            "reason": "The agent says the task is done."}) + "\n" for t in truth))
    labels = tmp_path / "labels.jsonl"
    label_through_the_page(ReviewInputs(data=[data], verdicts=verdicts, labels_out=labels, labeler="ana"), truth)
    return truth, data, labels


def test_certify_and_induce_init_use_the_last_label_of_each_id(journal, tmp_path, capsys, scripted_cli, monkeypatch):
    import rubricforge_dspy.cli.main as cli
    import rubricforge_dspy.cli.trust as trust

    monkeypatch.setattr(trust, "lm_from_args", cli.lm_from_args)  # certify's LM too is the scripted one
    truth, data, labels = journal
    lines = journal_lines(labels)
    assert len(lines) == 10 + 10 + 16 + 2 + 1 + 1  # every action is a line, the wrong first looks included
    wanted = {t.id: t.label for t in truth[:26]}
    assert {i: e.label for i, e in read_journal(labels).entries.items() if e.label is not None} == wanted
    first_looks = {t.id: 1 for t in truth[:10]}  # had the first line won, 5 failed items would read as passed
    assert sum({**wanted, **first_looks}.values()) == sum(wanted.values()) + 5

    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program, lm="scripted-judge")
    certified = tmp_path / "certified.json"
    code = main(["certify", str(program), "--data", str(data), "--labels", str(labels), "--out-program",
                 str(certified)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "WARNING: 4 unlabeled trajectories left out" in out.err and "using the 26 labeled ones" in out.err
    certificate = read_program(certified)["rubricforge"]["certificate"]
    # the last lines: 13 pass and 13 fail (the first looks would make 18 and 8); the naive judge passes all 13
    assert (certificate["n"], certificate["positives"], certificate["negatives"]) == (26, 13, 13)
    assert certificate["false_pass"]["k"] == certificate["false_pass"]["n"] == 13

    child = tmp_path / "child.json"
    code = main(["induce", "--init", str(program), "--data", str(data), "--labels", str(labels), "--out", str(child),
                 "--budget", "60", "--minibatch", "3", "--preset", "embedded"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "WARNING: 4 unlabeled trajectories left out" in out.err and "using the 26 labeled ones" in out.err
    manifest = read_program(child)["rubricforge"]
    assert manifest["induction"]["parent_rubric_sha256"] == load_judge(program).rubric_sha256  # --init
    splits = {m[1]: ast.literal_eval(m[2]) for m in re.finditer(r"^\s*(train|val|test): (\{.*\})$", out.err, re.M)}
    assert set(splits) == {"train", "val", "test"}
    assert sum(p["trajectories"] for p in splits.values()) == 26  # the labeled set: the last lines' labels
    assert sum(p["positives"] for p in splits.values()) == 13
    assert "26 of 26 labels joined" in out.err and "3 blank rows" in out.err  # 2 skips, 1 undone: no label
