"""examples/walkthrough.py runs offline with the scripted LMs and does what it says, end to end; and with
``--api-base/--model`` against an OpenAI-compatible server on 127.0.0.1 (the project's fake), as a DSPy
user meets it."""

from __future__ import annotations

import json
import runpy
import warnings

import pytest

from rubricforge_dspy.program.drift import UncertifiedJudgeWarning
from rubricforge_dspy.program.store import read_program
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, estimate_tokens, system_text, user_text
from tests.support.helpers import REPO
from tests.support.induction_http import is_reflection, reflection_reply


def run_walkthrough(argv):
    walkthrough = runpy.run_path(str(REPO / "examples" / "walkthrough.py"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = walkthrough["main"](argv)
    return code, caught


@pytest.mark.slow
def test_the_walkthrough_runs_with_scripted_lms(tmp_path, capsys):
    code, caught = run_walkthrough(["--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "walkthrough.json").read_text())
    assert summary["simulated"] is True and summary["judge_lm"] == "scripted-judge"
    assert summary["train"] + summary["test"] == 32
    assert "loaded 32 labeled episodes (0 skipped): 20 train, 12 test examples" in printed  # a count, not "[]"
    # the compiled judge beats the seed on held-out tasks, measured by dspy.Evaluate
    assert summary["evaluate"] == {"seed": 50.0, "compiled": 100.0}
    assert "dspy.Evaluate agreement on 12 test examples: seed 50.0%, compiled 100.0%" in printed
    # the package's judge-vs-label metric: a plain judge escalates nothing, so every test example is decided
    assert summary["evaluate_detail"]["compiled"] == {"agreement": 100.0, "agreed": 12, "decided": 12, "escalated": 0,
                                                      "failed": 0, "n": 12}
    assert summary["best_index"] == 1 and summary["certificate_false_pass"]["k"] == 0
    assert summary["reflection_failures"] == 0
    # the certificate compile measured on the test examples is in the program: the reloaded judge, loaded
    # with the certificate check on, runs without "no certificate"
    assert read_program(tmp_path / "judge.json")["rubricforge"]["certificate"]["false_pass"]["k"] == 0
    assert [str(w.message) for w in caught if issubclass(w.category, UncertifiedJudgeWarning)] == []
    # the reloaded judge as a GEPA metric fails the run whose booking errored, naming the criterion
    assert summary["gepa_metric"]["score"] == 0.0 and "7. Tool errors" in summary["gepa_metric"]["feedback"]
    # ... and as a TRL reward: the successful rollout above the failed one, nothing abstained
    good, bad = summary["trl_rewards"]
    assert good > 0.5 > bad and summary["reward_counters"] == {"judged": 2, "abstained": 0}


def server_judge(body: dict) -> dict:
    """A judge whose verdict follows its rubric: errored episodes fail only when a criterion says so."""
    text = user_text(body)
    errored = "tool_errors=0" not in text or "ERROR" in text
    if "tool_errors counter" in system_text(body) and errored:
        return {"reason": "7. Error counter: a tool call returned an error.", "passed": False, "score": 0.1}
    return {"reason": "The agent says the task is done.", "passed": True, "score": 0.9}


@pytest.mark.slow
def test_the_walkthrough_against_a_server_gives_the_reflection_lm_room_to_write_a_rubric(tmp_path, capsys):
    """With --api-base the reflection LM was the judge LM (max_tokens 256): a server cuts a whole rubric
    there (finish reason "length"), so every reflection was unusable and no rubric was ever proposed."""

    def responder(body, n):
        if is_reflection(body):
            reply = reflection_reply(body)
            text = json.dumps(reply) if isinstance(reply, dict) else reply
            if estimate_tokens(text) > body.get("max_tokens", 10**9):  # what a server does at max_tokens
                return Reply(content=text[:4 * body["max_tokens"]], finish_reason="length")
            return reply
        return server_judge(body)

    with FakeOpenAI(responder, model="fake-judge@r1") as fake:
        code, caught = run_walkthrough(["--out", str(tmp_path), "--api-base", fake.api_base,
                                        "--model", fake.model, "--budget", "60"])
        reflections = [b for b in fake.chat_bodies if is_reflection(b)]
        judged = [b for b in fake.chat_bodies if not is_reflection(b)]
    assert code == 0
    summary = json.loads((tmp_path / "walkthrough.json").read_text())
    assert reflections and all(b["max_tokens"] >= 4096 for b in reflections)
    assert judged and all(b["max_tokens"] == 256 for b in judged)  # the judge keeps its own short answers
    assert summary["reflection_failures"] == 0
    assert summary["candidates"] >= 2 and summary["best_index"] >= 1  # a rubric was proposed and chosen
    assert summary["evaluate"]["compiled"] > summary["evaluate"]["seed"]
    assert [str(w.message) for w in caught if issubclass(w.category, UncertifiedJudgeWarning)] == []
    assert "(0 skipped)" in capsys.readouterr().out
