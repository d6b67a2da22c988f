"""`JobOptions`: one frozen record of how a judging job runs, given to every back end; its fields may also
be given as keyword arguments, which replace the record's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rubricforge_dspy.apply import JobOptions
from rubricforge_dspy.apply.stream import judge_stream, run_judge_file
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from tests.support.helpers import make_dataset

AIRLINE = Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def _lm() -> ScriptedLM:
    def answer(messages):
        failed = "(ERROR)" in last_user_text(messages)
        return {"reason": "Checked.", "passed": not failed, "score": 0.1 if failed else 0.9}
    return ScriptedLM(answer, model="scripted-judge")


def _ids(path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_the_record_and_its_keyword_overrides_decide_the_run(tmp_path):
    data = make_dataset(8)
    options = JobOptions(limit=3, progress=False, concurrency=2)
    first = judge_stream(TrajectoryJudge(), data, tmp_path / "a.jsonl", options, lm=_lm())
    assert first.judged == 3 and sorted(_ids(tmp_path / "a.jsonl")) == sorted(t.id for t in data[:3])
    second = judge_stream(TrajectoryJudge(), data, tmp_path / "a.jsonl", options, lm=_lm(), limit=5)
    assert (second.resumed, second.judged) == (3, 2)  # the override replaced the record's limit
    assert options.limit == 3  # the record itself is unchanged (frozen)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.limit = 4


def test_an_unknown_option_or_a_bad_value_is_refused_before_any_call(tmp_path):
    lm = _lm()
    with pytest.raises(TypeError, match="concurency"):
        judge_stream(TrajectoryJudge(), make_dataset(2), tmp_path / "v.jsonl", lm=lm, concurency=2)
    with pytest.raises(InputError, match="concurrency must be >= 1"):
        judge_stream(TrajectoryJudge(), make_dataset(2), tmp_path / "v.jsonl", JobOptions(concurrency=0), lm=lm)
    with pytest.raises(InputError, match="on_duplicate"):
        judge_stream(TrajectoryJudge(), make_dataset(2), tmp_path / "v.jsonl", lm=lm, on_duplicate="keep")
    assert not (tmp_path / "v.jsonl").exists()  # refused before the output was touched


def test_a_file_run_keeps_a_verdict_cache_unless_the_record_says_otherwise(tmp_path):
    cached = run_judge_file(None, AIRLINE, tmp_path / "a" / "v.jsonl", lm=_lm(), progress=False, limit=3)
    assert (tmp_path / "a" / ".rubricforge_cache").is_dir() and cached.judged == 3
    plain = run_judge_file(None, AIRLINE, tmp_path / "b" / "v.jsonl", JobOptions(progress=False, limit=3), lm=_lm())
    assert not (tmp_path / "b" / ".rubricforge_cache").exists() and plain.judged == 3
