"""A frozen RubricForge judge as an Inspect scorer: a real Inspect eval with Inspect's mock model and a
tool-using solver, scored against the fake judge server on 127.0.0.1 (and offline with a scripted LM).
Leak canaries: the target and the sample metadata never reach the judge."""

from __future__ import annotations

import math

import pytest

inspect_ai = pytest.importorskip("inspect_ai",
                                 reason="the Inspect integration needs the extra: pip install -e '.[inspect]'")

from inspect_ai import Task  # noqa: E402
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.solver import generate, use_tools  # noqa: E402
from inspect_ai.tool import ToolError, tool  # noqa: E402

from rubricforge_dspy.core.errors import InputError  # noqa: E402
from rubricforge_dspy.integrations.inspect import rubricforge_scorer  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.lm.config import LMConfig  # noqa: E402
from rubricforge_dspy.program.store import freeze  # noqa: E402
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text  # noqa: E402
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text  # noqa: E402

TARGET_CANARY = "CANARY-TARGET-5d1e"
META_CANARY = "CANARY-METADATA-77aa"
FLIGHTS = {"s-ok": "HAT001", "s-bad": "HAT666", "s-abstain": "HAT999"}


@tool
def book_reservation():
    async def execute(flight: str) -> str:
        """Book a flight.

        Args:
            flight: the flight number.
        """
        if flight == "HAT666":
            raise ToolError("card declined")
        return f"confirmation for {flight}"

    return execute


def mock_agent(messages, tools, tool_choice, config):
    """Inspect's mock model scripted as an agent: ask for the booking tool, then answer. (Usage is set, so
    the mock model does not count tokens with tiktoken, which downloads its encoding.)"""
    last = messages[-1]
    if last.role == "tool":
        output = ModelOutput.from_content("mockllm/model", "Your flight is booked.")
    else:
        flight = next(f for f in FLIGHTS.values() if f in last.text)
        output = ModelOutput.for_tool_call("mockllm/model", "book_reservation", {"flight": flight})
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return output


def make_task(scorer) -> Task:
    samples = [Sample(id=sid, input=f"Book flight {flight} for me.", target=TARGET_CANARY,
                      metadata={"secret": META_CANARY}) for sid, flight in FLIGHTS.items()]
    return Task(dataset=samples, solver=[use_tools([book_reservation()]), generate()], scorer=scorer)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), path, lm="fake-judge")
    return path


def fake_judge(body, n):
    text = user_text(body)
    if "HAT999" in text:
        return "garbage"  # not a verdict: the judge abstains
    if "(ERROR)" in text:
        return {"reason": "Criterion 2: the booking tool returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The tool confirmed the booking.", "passed": True, "score": 0.9}


def run(task, tmp_path):
    model = get_model("mockllm/model", custom_outputs=mock_agent)
    [log] = inspect_eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    return {s.id: s.scores["rubricforge"] for s in log.samples}, log


@pytest.mark.slow
def test_inspect_eval_scored_by_the_frozen_judge_over_http(program, tmp_path):
    with FakeOpenAI(responder=fake_judge) as fake:
        scorer = rubricforge_scorer(str(program), lm=LMConfig(model=fake.model, api_base=fake.api_base))
        scores, log = run(make_task(scorer), tmp_path)
        bodies = [user_text(b) for b in fake.chat_bodies]
    assert len(bodies) == 3
    assert not any(TARGET_CANARY in b or META_CANARY in b for b in bodies)
    bad = next(b for b in bodies if "HAT666" in b)
    assert "book_reservation" in bad and "(ERROR)" in bad and "card declined" in bad
    assert scores["s-ok"].value == "C" and scores["s-ok"].explanation == "The tool confirmed the booking."
    assert scores["s-bad"].value == "I" and scores["s-bad"].metadata["criterion"].startswith("2.")
    assert scores["s-bad"].metadata["score"] == 0.1 and scores["s-bad"].metadata["abstained"] is False
    abstained = scores["s-abstain"]
    assert math.isnan(abstained.value) and abstained.reason == "grader_failed"
    assert abstained.metadata["abstained"] is True and abstained.metadata["error_kind"] == "parse"
    [result] = log.results.scores
    assert result.metrics["accuracy"].value == pytest.approx(0.5)  # 1 of the 2 verdicts; the abstention unscored


@pytest.mark.slow
def test_inspect_scorer_offline_with_scripted_lm(program, tmp_path):
    seen = []

    def strict(messages):
        seen.append(last_user_text(messages))
        failed = "(ERROR)" in seen[-1]
        return {"reason": "a tool call failed" if failed else "ok", "passed": not failed,
                "score": 0.1 if failed else 0.9}

    scores, _ = run(make_task(rubricforge_scorer(str(program), lm=ScriptedLM(strict, model="scripted"))), tmp_path)
    assert {sid: s.value for sid, s in scores.items()} == {"s-ok": "C", "s-bad": "I", "s-abstain": "C"}
    assert len(seen) == 3 and not any(TARGET_CANARY in t or META_CANARY in t for t in seen)


def test_missing_program_is_refused_before_any_sample(tmp_path):
    with pytest.raises(InputError, match="no such program"):
        rubricforge_scorer(str(tmp_path / "nope.json"))


def test_inspect_score_metadata_shows_the_raw_and_calibrated_score_and_the_pass_threshold(tmp_path):
    """A program with a pass threshold on calibrated scores fails a run the LM scored 0.9: the metadata
    showed only "score": 0.9 beside an incorrect value; it now shows what decided it."""
    from rubricforge_dspy.judge.operating_point import Calibration

    program = tmp_path / "capped.json"
    calibration = Calibration("platt", {"a": 1.0, "b": -0.5}, n=20)  # 0.9 -> 0.599
    freeze(TrajectoryJudge(), program, lm="scripted",
           extra={"calibration": calibration.to_dict(), "threshold": {"pass_threshold": 0.7}})
    confident = ScriptedLM(lambda messages: {"reason": "ok", "passed": True, "score": 0.9}, model="scripted")
    scores, _ = run(make_task(rubricforge_scorer(str(program), lm=confident)), tmp_path)
    ok = scores["s-ok"]
    assert ok.value == "I"
    assert ok.metadata["score"] == 0.9 and ok.metadata["score_calibrated"] == pytest.approx(calibration.apply(0.9))
    assert ok.metadata["pass_threshold"] == 0.7 and ok.metadata["pass_threshold_on"] == "score_calibrated"
