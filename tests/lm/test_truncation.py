"""A cut answer is never a verdict: truncation is seen from the completion's finish reason, per call,
for any `dspy.LM`, whatever DSPy's logging level, and whether DSPy answered from the network or from its
own response cache (in memory, or on disk in a later process)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dspy
import pytest
from dspy import lm15
from dspy.clients import base_lm

from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge, VerdictFormatError
from rubricforge_dspy.lm.truncation import finish_reasons
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text
from rubricforge_dspy.testing.scripted import last_user_text, request_messages

ROOT = Path(__file__).resolve().parents[2]
VERDICT = {"reason": "The booking tool returned a confirmation.", "passed": True, "score": 0.9}
TEXT = "1. user: book flight HAT001\n2. assistant: booked!"


@pytest.fixture
def dspy_cache(tmp_path):
    """DSPy's own response cache ON (memory and disk, in tmp_path) and DSPy's logging silenced, as in a
    pipeline that quiets DSPy; both restored afterwards."""
    previous, logger = dspy.cache, logging.getLogger("dspy")
    level = logger.level
    directory = tmp_path / "dspy-cache"
    dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(directory))
    logger.setLevel(logging.ERROR)
    try:
        yield directory
    finally:
        with dspy._cache_lock:
            dspy.cache = previous
        logger.setLevel(level)


def cut_then_complete(body, n):
    """Complete, parseable JSON, but with finish reason `length` unless the trajectory says "whole"."""
    whole = "WHOLE-ITEM" in user_text(body)
    return Reply(content=VERDICT, finish_reason="stop" if whole else "length")


def assert_truncated(judge, text=TEXT):
    with pytest.raises(VerdictFormatError) as caught:
        judge(trajectory=text)
    assert caught.value.kind == "truncated"
    verdict = judge_verdict(judge, text)
    assert verdict.abstained and verdict.error_kind == "truncated" and verdict.passed is False


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_plain_dspy_lm_cut_answer_is_never_a_verdict_silenced_logging_and_dspy_cache_on(
        dspy_cache, tmp_path, engine):
    """With DSPy logging at ERROR and DSPy's cache on, a plain `dspy.LM` (lm15 or LiteLLM engine) whose
    server answers complete JSON with finish reason `length` gives no verdict: not on the first call, not
    on the second (a cache hit: no request is sent), not through `load_judge()`, and not in a second Python
    process that reuses the disk cache with the server gone."""
    program = tmp_path / "judge.json"
    TrajectoryJudge().save(program)
    with FakeOpenAI(cut_then_complete) as fake:
        lm = dspy.LM(f"openai/{fake.model}", api_base=fake.api_base, api_key="x", num_retries=0, engine=engine)
        assert lm.cache is True  # DSPy's default
        judge = TrajectoryJudge()
        judge.set_lm(lm)
        assert_truncated(judge)
        assert fake.n_requests == 1
        assert_truncated(judge)  # the same prompt again: DSPy's memory cache answers
        assert fake.n_requests == 1
        loaded = load_judge(program)
        loaded.set_lm(lm)
        assert_truncated(loaded)
        assert fake.n_requests == 1
        # The same LM with an answer that is not cut: a verdict (the check is about the finish reason).
        assert judge(trajectory=TEXT + " WHOLE-ITEM").passed is True
        api_base, model = fake.api_base, fake.model
    script = textwrap.dedent(f"""
        import json, logging, sys
        import dspy
        from rubricforge_dspy.judge.module import TrajectoryJudge, VerdictFormatError
        logging.getLogger("dspy").setLevel(logging.ERROR)
        dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir={str(dspy_cache)!r})
        lm = dspy.LM("openai/{model}", api_base="{api_base}", api_key="x", num_retries=0, engine="{engine}")
        judge = TrajectoryJudge()
        judge.set_lm(lm)
        try:
            prediction = judge(trajectory={TEXT!r})
        except VerdictFormatError as error:
            print(json.dumps({{"kind": error.kind}}))
        else:
            print(json.dumps({{"verdict": prediction.passed}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSPY_CACHEDIR": str(dspy_cache)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"kind": "truncated"}


class CutEngine:
    """An offline DSPy custom engine that answers a complete verdict, cut (finish reason `length`) when the
    trajectory contains "CUT-ITEM". It does not raise: like DSPy's own engines, it only reports the cut."""

    def __init__(self):
        self.calls = 0
        self.lock = threading.Lock()

    def complete(self, request):
        with self.lock:
            self.calls += 1
        finish = "length" if "CUT-ITEM" in last_user_text(request_messages(request)) else "stop"
        return lm15.Response(id=None, model=request.model, finish_reason=finish,
                             message=lm15.Message.assistant([lm15.TextPart(json.dumps(VERDICT))]),
                             usage=lm15.Usage(input_tokens=10, output_tokens=10))


def test_offline_cut_answers_are_refused_per_call_under_concurrency_and_from_dspy_cache(dspy_cache):
    """Offline (a custom engine that only reports the finish reason): 48 concurrent judge calls on 8
    threads, every other one cut; each cut call is truncated and each whole one is a verdict (the finish
    reason is read per call, never from another thread's history). Run twice: the second round is all
    DSPy cache hits and gives the same outcome."""
    engine = CutEngine()
    lm = dspy.LM("openai/offline-judge", engine=engine, cache=True, num_retries=0)
    judge = TrajectoryJudge()
    judge.set_lm(lm)
    texts = [f"1. user: item {i} {'CUT-ITEM' if i % 2 else 'WHOLE-ITEM'}" for i in range(48)]

    def outcome(text):
        verdict = judge_verdict(judge, text)
        return "truncated" if verdict.error_kind == "truncated" else ("verdict" if not verdict.abstained else "?")

    expected = ["truncated" if i % 2 else "verdict" for i in range(48)]
    for _ in range(2):
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(outcome, texts)) == expected
    assert engine.calls == 48  # the second round came from DSPy's cache


def test_a_cut_answer_is_refused_when_dspy_history_is_disabled(dspy_cache):
    """`disable_history=True` (the channel the finish reason travels on) does not let a cut answer
    through, and the user's setting still keeps no global history."""
    lm = dspy.LM("openai/offline-judge", engine=CutEngine(), cache=True, num_retries=0)
    judge = TrajectoryJudge()
    judge.set_lm(lm)
    before = len(base_lm.GLOBAL_HISTORY)
    with dspy.context(disable_history=True):
        assert_truncated(judge, "1. user: CUT-ITEM")
        assert judge(trajectory="1. user: WHOLE-ITEM").passed is True
    assert len(base_lm.GLOBAL_HISTORY) == before


def test_finish_reasons_read_every_response_shape():
    """lm15 responses, OpenAI-shaped chat completions (dicts or objects), several candidates, and the
    Responses API's `incomplete` status."""
    response = lm15.Response(id=None, model="m", finish_reason="length",
                             message=lm15.Message.assistant([lm15.TextPart("{}")]), usage=lm15.Usage())
    assert finish_reasons(response) == ["length"]
    assert finish_reasons((response, response)) == ["length", "length"]
    assert finish_reasons({"choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}]}) == ["stop", "length"]
    assert finish_reasons({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}) == [
        "max_output_tokens"]
    assert finish_reasons({"status": "completed"}) == [None]
