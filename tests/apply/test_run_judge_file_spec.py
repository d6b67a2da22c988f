"""`run_judge_file` takes the data as one frozen `DataSpec` (issue 42 item 4): the same verdict lines as the separate
reading parameters, and a reading option given beside the spec, or a limit the job options contradict, is refused
before any LM call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.apply import JobOptions
from rubricforge_dspy.apply.stream import run_judge_file
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.spec import DataSpec
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text

AIRLINE = Path(__file__).resolve().parents[2] / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def _lm(asked: list) -> ScriptedLM:
    def answer(messages):
        asked.append(last_user_text(messages))
        failed = "(ERROR)" in last_user_text(messages)
        return {"reason": "Checked.", "passed": not failed, "score": 0.1 if failed else 0.9}

    return ScriptedLM(answer)


def _lines(path: Path) -> list[dict]:
    lines = [{k: v for k, v in json.loads(x).items() if k != "latency_s"} for x in path.read_text().splitlines()]
    return sorted(lines, key=lambda line: line["id"])  # (written as the calls finish)


def test_a_spec_judges_what_the_separate_parameters_judge(tmp_path):
    spec = DataSpec(paths=(str(AIRLINE),), format="tau_bench", label_rule=">=1", limit=5, on_error="skip")
    by_spec = run_judge_file(None, spec, tmp_path / "a" / "v.jsonl", JobOptions(progress=False, cache=False),
                             lm=_lm([]))
    by_parts = run_judge_file(None, AIRLINE, tmp_path / "b" / "v.jsonl", JobOptions(progress=False, cache=False),
                              lm=_lm([]), format="tau_bench", label_threshold=">=1", on_error="skip", limit=5)
    assert by_spec.judged == by_parts.judged == 5
    assert _lines(tmp_path / "a" / "v.jsonl") == _lines(tmp_path / "b" / "v.jsonl")


@pytest.mark.parametrize("beside", [{"format": "tau_bench"}, {"on_error": "skip"}, {"label_threshold": 0.5},
                                    {"limit": 3}])
def test_an_option_beside_the_spec_is_refused_before_any_call(tmp_path, beside):
    asked: list = []
    spec = DataSpec(paths=(str(AIRLINE),), limit=5)
    with pytest.raises(InputError, match="DataSpec"):
        run_judge_file(None, spec, tmp_path / "v.jsonl", JobOptions(progress=False), lm=_lm(asked), **beside)
    assert asked == [] and not (tmp_path / "v.jsonl").exists()
