"""`apply.cascade.run_cascade` offline (a scripted LM): every verdict line carries its LM call's tokens and they add
up to the run's; an interrupt in the LLM stage keeps the floor's lines and the finished calls' lines, records the
run as interrupted, and the next run asks the LM only for the items not in the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.apply.cascade import run_cascade
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text

SURE = {"reason": "The agent bought the item.", "passed": True, "score": 0.9}
UNSURE = {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}


def _cascade(halves) -> Cascade:
    floor = FloorJudge(SymptomFloor.from_json((halves / "floor.json").read_text()))
    return Cascade([floor, TrajectoryJudge()], [StageRule("floor", 0.95, 0.05), StageRule("judge", 0.8, 0.2)])


def _data(halves, n=40):
    return list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))[:n]


def _answer(messages):
    return SURE if len(last_user_text(messages)) % 2 else UNSURE  # a fixed answer per trajectory


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _counted(asked: list):
    """A scripted LM whose answers are counted in `asked` (the run calls a one-attempt copy of the LM)."""
    def answer(messages):
        asked.append(last_user_text(messages))
        return _answer(messages)

    return ScriptedLM(answer)


def test_each_line_carries_its_tokens_and_they_add_up_to_the_run(halves, tmp_path):
    out, asked = tmp_path / "v.jsonl", []
    run = run_cascade(_cascade(halves), _data(halves), out, lm=_counted(asked), concurrency=2)
    lines = _lines(out)
    judged = [x for x in lines if x["lm_stages_run"]]
    assert len(lines) == 40 and len(judged) == len(asked) == run.lm_calls == run.lm_asked > 0
    assert all(set(x["lm_tokens"]) == {"judge"} and x["lm_tokens"]["judge"]["prompt_tokens"] > 0 for x in judged)
    assert all(x["lm_tokens"] == {} for x in lines if not x["lm_stages_run"])
    summed = {k: sum(x["lm_tokens"]["judge"][k] for x in judged) for k in ("prompt_tokens", "completion_tokens")}
    assert run.tokens == summed == run.item_tokens and run.lm_items == len(judged)
    spend = run.token_spend()
    total = summed["prompt_tokens"] + summed["completion_tokens"]
    assert spend["estimate_judging_everything"]["total_tokens"] == round(total / len(judged) * 40)
    assert f"LM tokens: {total:,}" in run.format()


def test_an_interrupt_in_the_llm_stage_keeps_what_was_settled_and_the_next_run_resumes(halves, tmp_path):
    out, calls = tmp_path / "v.jsonl", []

    def interrupted(messages):
        calls.append(last_user_text(messages))
        if len(calls) == 4:
            raise KeyboardInterrupt  # Ctrl-C during the LLM stage
        return _answer(messages)

    data = _data(halves)
    with pytest.raises(KeyboardInterrupt):
        run_cascade(_cascade(halves), data, out, lm=ScriptedLM(interrupted), concurrency=1)
    kept = _lines(out)
    # the 3 calls answered before the 4th was interrupted are kept; a call the executor had already started
    # may finish and be kept too (never more lines than answered calls)
    assert {x["stage"] for x in kept} >= {"floor"} and 3 <= sum(x["stage"] != "floor" for x in kept) < len(calls)
    runs = json.loads(Path(f"{out}.job.json").read_text())["cascade_runs"]
    assert [r["outcome"] for r in runs] == ["interrupted"]

    asked: list = []
    run = run_cascade(_cascade(halves), data, out, lm=_counted(asked), concurrency=1)
    final = _lines(out)
    assert len(final) == 40 and len({x["id"] for x in final}) == 40 and run.resumed == len(kept)
    assert len(asked) == 40 - len(kept) - sum(x["stage"] == "floor" for x in final if x["id"] not in
                                            {k["id"] for k in kept})
    assert {x["id"]: x for x in final if x["id"] in {k["id"] for k in kept}} == {x["id"]: x for x in kept}


def test_a_slow_answer_holds_only_its_own_slot(halves, tmp_path, monkeypatch):
    """No chunk barrier: while the LLM stage's first answer is held, the run goes on through the rest of the input
    (the floor, then every other item the judge is asked about), even past the old chunk's end; every id once."""
    import threading

    import rubricforge_dspy.apply.runner as runner

    monkeypatch.setattr(runner, "CASCADE_CHUNK", 10)  # the chunk the runner used to wait on
    data = _data(halves)
    reaching = run_cascade(_cascade(halves), data, tmp_path / "count.jsonl", lm=_counted([]), concurrency=2).lm_asked
    assert reaching > 10  # the judge is asked about items of several of the old chunks
    asked: list = []
    lock, all_asked, held = threading.Lock(), threading.Event(), []

    def first_held(messages):
        with lock:
            asked.append(last_user_text(messages))
            first = len(asked) == 1
            if len(asked) == reaching:
                all_asked.set()
        if first:  # held until every other item was asked (bounded: a barrier would hold it to the end)
            held.append(all_asked.wait(20))
        return _answer(messages)

    out = tmp_path / "v.jsonl"
    run = run_cascade(_cascade(halves), data, out, lm=ScriptedLM(first_held), concurrency=2)
    assert held == [True]  # every other item was asked while the first answer was held
    lines = _lines(out)
    assert len(lines) == 40 and len({x["id"] for x in lines}) == 40 and run.lm_asked == len(asked) == reaching


def test_a_cascade_line_says_what_its_llm_stage_read_and_a_floor_line_does_not(halves, tmp_path):
    """The verdict line's ``evidence`` (the LLM stage's render) and ``tokens`` (its calls) on the items an LLM
    stage was asked about; a line the floor settled reads features, not text: no evidence, no tokens."""
    from rubricforge_dspy.evidence.render import RenderConfig, render_with_evidence

    out = tmp_path / "v.jsonl"
    data = _data(halves)
    run_cascade(_cascade(halves), data, out, lm=_counted([]), concurrency=2)
    lines = {x["id"]: x for x in _lines(out)}
    judged = [x for x in lines.values() if x["lm_stages_run"]]
    floor_only = [x for x in lines.values() if not x["lm_stages_run"]]
    assert judged and floor_only
    for trajectory in data:
        line = lines[trajectory.id]
        if line["lm_stages_run"]:
            assert line["evidence"] == render_with_evidence(trajectory, RenderConfig())[1].to_dict()
            assert line["tokens"]["prompt"] == line["lm_tokens"]["judge"]["prompt_tokens"] > 0
            assert line["tokens"]["calls"] == 1
        else:
            assert "evidence" not in line and "tokens" not in line
