"""Any judge as a cascade stage, in Python: `RecordedJudge` (verdicts looked up by id: a missing id or an abstained
line hands the item on, counted, never an LM error), its confidence levels, and Python stages (a callable returning
a Verdict) that save and reload by import path only when importing is allowed, or refuse to save with the reason."""

from __future__ import annotations

import json
import math

import pytest

from rubricforge_dspy.core.verdict import Verdict, VerdictLineError
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.recorded import CallableJudge, RecordedJudge
from rubricforge_dspy.program.store import ProgramError
from rubricforge_dspy.trust.cascade import fit_cascade
from tests.support.helpers import make_trajectory
from tests.support.recorded import no_tool_error_passes


def write(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def items(n=4):
    return [make_trajectory(i, success=i % 2 == 0, task=f"t{i}") for i in range(n)]


def test_a_recorded_stage_decides_known_ids_and_hands_on_missing_or_abstained_ones(tmp_path):
    ts = items(4)
    path = write(tmp_path / "v.jsonl",
                 {"id": ts[0].id, "passed": True, "score": 1.0, "abstained": False, "reason": "ok"},
                 {"id": ts[1].id, "passed": False, "score": 0.0, "abstained": False},
                 {"id": ts[2].id, "passed": False, "score": 0.0, "abstained": True, "error_kind": "timeout",
                  "error": "the other tool timed out"})
    recorded = RecordedJudge.from_file(path)
    assert recorded.confidence_levels == (0.0, 1.0) and recorded.predictors() == []
    cascade = Cascade([recorded], [StageRule("recorded", 0.5, 0.4)])
    result = cascade.batch(ts)
    assert result.stages == ["recorded", "recorded", "escalated", "escalated"]
    assert [v.passed for v in result[:2]] == [True, False]
    # another tool's timeout is not this stage's LM error: the item is handed on (to a person), not failed
    assert result[2].error_kind == "escalated" and result[3].error_kind == "escalated"
    assert recorded.n_missing == 1 and recorded.missing_ids == [ts[3].id] and recorded.n_lookups == 4
    one = cascade(trajectory=ts[3])
    assert one.stage == "escalated" and recorded.n_missing == 2
    with pytest.raises(Exception, match="looks a trajectory up by its id"):
        recorded(trajectory="rendered text")


def test_continuous_scores_make_a_continuous_stage_and_bad_lines_name_file_and_line(tmp_path):
    ts = items(2)
    path = write(tmp_path / "v.jsonl", {"id": ts[0].id, "passed": True, "score": 0.83, "abstained": False},
                 {"id": ts[1].id, "passed": False, "score": 0.2, "score_calibrated": 0.1, "abstained": False})
    recorded = RecordedJudge.from_file(path)
    assert recorded.confidence_levels is None
    assert recorded(trajectory=ts[1]).score_calibrated == 0.1  # the schema's key, read as the stage's confidence
    bad = write(tmp_path / "bad.jsonl", {"id": "a", "passed": True, "score": 1.0, "abstained": False},
                {"id": "a", "passed": True, "score": 1.0, "abstained": False})
    with pytest.raises(VerdictLineError, match=r"bad.jsonl:2: duplicate id 'a'"):
        RecordedJudge.from_file(bad)


def test_verdicts_read_from_a_platform_are_written_beside_the_stage_and_pinned(tmp_path):
    ts = items(2)
    recorded = RecordedJudge.from_lines([{"id": ts[0].id, "passed": True, "score": 1.0, "abstained": False}],
                                        "somewhere")
    cascade_path = tmp_path / "c.json"
    Cascade([recorded], [StageRule("recorded", 0.5, 0.4)]).save(cascade_path)
    assert (tmp_path / "c.recorded.verdicts.jsonl").is_file()
    loaded = load_judge(cascade_path)
    assert loaded(trajectory=ts[0]).passed is True and loaded(trajectory=ts[1]).stage == "escalated"
    (tmp_path / "c.recorded.verdicts.jsonl").write_text("")
    with pytest.raises(ProgramError, match="is not the file it was saved with"):
        load_judge(cascade_path)


def test_a_callable_stage_fits_saves_and_reloads_by_import_path_only_when_allowed(tmp_path):
    ts = [make_trajectory(i, success=i % 3 != 0, task=f"t{i}") for i in range(90)]
    cascade = fit_cascade([no_tool_error_passes], ts, alpha=0.1, delta=0.1, method="bonferroni")
    assert isinstance(cascade.stages[0], CallableJudge)
    path = tmp_path / "c.json"
    cascade.save(path)
    stage_file = json.loads((tmp_path / f"c.{cascade.rules[0].name}.json").read_text())
    assert stage_file["import"] == "tests.support.recorded:no_tool_error_passes"
    with pytest.raises(ProgramError, match=r"Python code to import \(tests.support.recorded:no_tool_error_passes\)"):
        load_judge(path)
    loaded = load_judge(path, allow_import=True)
    assert loaded.stages[0].fn is no_tool_error_passes
    assert [v.passed for v in loaded.batch(ts[:6])] == [v.passed for v in cascade.batch(ts[:6])]


def test_a_stage_without_an_import_path_refuses_to_save_with_the_reason(tmp_path):
    stage = CallableJudge(lambda t: Verdict.from_answer(True, 0.9))
    with pytest.raises(ProgramError, match="stage 'mine' cannot be saved: .*a lambda"):
        Cascade([stage], [StageRule("mine", 0.5, 0.1)]).save(tmp_path / "c.json")

    def local(t):
        return Verdict.from_answer(True, 0.9)

    with pytest.raises(ProgramError, match="defined inside another"):
        Cascade([CallableJudge(local)], [StageRule("mine", 0.5, -math.inf)]).save(tmp_path / "c.json")
