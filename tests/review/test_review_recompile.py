"""Labels the review page's writer appended (with a changed mind, a skip and an undo) recompile a judge:
the journal is read back, joined onto unlabeled trajectories, and `induce(init=parent)` (what
``rubricforge induce --init P --labels L`` runs) learns from exactly those labels, with a scripted LM."""

from __future__ import annotations

import dataclasses
import re

import pytest

dspy = pytest.importorskip("dspy", reason="induction needs DSPy (./install.sh)")
pytestmark = pytest.mark.slow

from rubricforge_dspy.core.rubric import SEED_RUBRIC  # noqa: E402
from rubricforge_dspy.data.label_journal import read_journal  # noqa: E402
from rubricforge_dspy.data.labels import join_labels  # noqa: E402
from rubricforge_dspy.data.split import split_by_task  # noqa: E402
from rubricforge_dspy.induction.inducer import InductionConfig, induce  # noqa: E402
from rubricforge_dspy.judge.loading import load_judge  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.program.store import read_program, save_judge  # noqa: E402
from rubricforge_dspy.review.labels import LabelsFile  # noqa: E402
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text  # noqa: E402
from tests.support.helpers import make_dataset  # noqa: E402

ERROR_CRITERION = "7. Error counter: fail the episode when the tool_errors counter is above zero."


def scripted_judge(messages):
    """Passes everything unless its rubric has a criterion about the tool_errors counter."""
    errors = int(re.search(r"tool_errors=(\d+)", last_user_text(messages)).group(1))
    if "tool_errors counter" in system_text(messages) and errors > 0:
        return {"reason": "A tool call returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The agent says the task is done.", "passed": True, "score": 0.9}


def reflection(messages):
    return {"new_instruction": SEED_RUBRIC.replace("\n\nScoring:", f"\n{ERROR_CRITERION}\n\nScoring:")}


def test_labels_from_the_review_journal_recompile_the_judge_with_induce_init(tmp_path):
    truth = make_dataset(24)
    unlabeled = [dataclasses.replace(t, label=None, reward=None) for t in truth]
    journal = tmp_path / "labels.jsonl"
    with LabelsFile(journal, "ana") as labels:  # what the page does, action by action
        for t in truth:
            labels.label(t.id, "fail" if t.label else "pass")  # a first, wrong guess
        for t in truth:
            labels.label(t.id, "pass" if t.label else "fail", "checked the tool results")  # changed mind: wins
        labels.label(truth[0].id, "skip")
        labels.undo()  # the skip is taken back: the last label of truth[0] stands again
    joined = join_labels(unlabeled, read_journal(journal))
    assert [t.label for t in joined] == [t.label for t in truth]  # every label is the last one written
    parent_path = tmp_path / "parent.json"
    save_judge(TrajectoryJudge(), parent_path)
    parent = load_judge(parent_path)
    split = split_by_task(list(joined), seed=0)
    child = induce(split.train, split.val, judge_lm=ScriptedLM(scripted_judge, model="scripted-judge"),
                   reflection_lm=ScriptedLM(reflection, model="scripted-reflection"), init=parent,
                   config=InductionConfig(budget=60, minibatch=3, seed=0), out_path=tmp_path / "child.json")
    manifest = read_program(tmp_path / "child.json")["rubricforge"]
    assert manifest["induction"]["parent_rubric_sha256"] == parent.rubric_sha256
    assert child.sweep[0]["rubric_sha256"] == parent.manifest["rubric_sha256"]  # the parent was the seed
    assert child.beat_seed and ERROR_CRITERION in child.judge.rubric  # the labels taught the error criterion
