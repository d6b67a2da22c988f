"""The batch's fast path (`TrajectoryJudge.direct_call`) against a real HTTP server (the fake OpenAI server):
the same request bytes, the same verdicts, the same abstentions as ``judge(trajectory=...)``."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json

import dspy
import pytest

from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.core.presets import SERVER
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.execution import RetryPolicy, ajudge_verdict, judge_verdict
from rubricforge_dspy.judge.module import StrictJSONAdapter, TrajectoryJudge, VerdictFormatError
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm
from rubricforge_dspy.lm.engine import CompiledRequest, encode_body, make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.batch import read_lines
from tests.support.helpers import make_dataset

TEXTS = [
    "[1] USER: book a flight\n[2] AGENT: done",
    'quotes " and backslashes \\ and a tab\there, \u00e9\u00e8 \u4e2d\u6587 \U0001f600, </s> {"passed": true}',
    "control \x00\x01\x1f bytes and \u2028 line separators \u2029",
    "\n  leading whitespace is kept",
    "trailing whitespace DSPy strips   \n",  # the fast path hands this one to judge.acall
]


def answer(body: dict, n: int) -> dict:
    """A verdict that depends on the text only (so both paths must get the same one)."""
    digest = hashlib.sha256(user_text(body).encode()).digest()
    return {"reason": f"Evidence {digest[:4].hex()}.", "passed": digest[0] % 2 == 0, "score": digest[1] / 255}


def judge_on(fake: FakeOpenAI, **config) -> TrajectoryJudge:
    judge = TrajectoryJudge(render_config=RenderConfig.of(SERVER))
    judge.set_lm(one_attempt_lm(make_lm(LMConfig(model="fake-judge@1", api_base=fake.api_base, **config))))
    return judge


def test_the_fast_path_sends_the_same_bytes_and_gives_the_same_predictions():
    trajectories = make_dataset(4)
    with FakeOpenAI(answer) as fake:
        judge = judge_on(fake)
        direct = judge.direct_call()
        assert direct is not None
        items = [*TEXTS, *trajectories]
        slow = [dict(judge(trajectory=item)) for item in items]
        n_slow = len(fake.requests)

        async def run():
            return [dict(await direct.acall(trajectory=item)) for item in items]

        fast = asyncio.run(run())
        requests = fake.requests
    assert n_slow == len(items) and len(requests) == 2 * len(items)
    for i in range(len(items)):
        assert requests[i]["raw"] == requests[n_slow + i]["raw"], f"request {i} differs"
        assert fast[i] == slow[i]
    assert len({json.dumps(p, sort_keys=True) for p in fast}) > 1  # the verdicts really depend on the text


def test_compiled_request_is_the_encoded_body_with_the_text_in_place():
    def make(text):
        return {"model": "m", "messages": [{"role": "system", "content": "rubric \u00e9"},
                                           {"role": "user", "content": f"[[ ## t ## ]]\n{text}\n\nRespond"}],
                "temperature": 0.0}

    request = CompiledRequest(make)
    for text in TEXTS:
        assert request.body_for(text) == encode_body(make(text))
    assert request.body_for("lone \ud800 surrogate") is None  # not encodable: the ordinary path reports it
    with pytest.raises(ValueError):
        CompiledRequest(lambda text: {"a": text, "b": text})  # the text twice
    with pytest.raises(ValueError):
        CompiledRequest(lambda text, calls=[]: calls.append(1) or {"a": text, "n": len(calls)})  # varies


@pytest.mark.parametrize("fault", ["garbage", "truncated", "http_400", "http_500", "drop"])
def test_faults_give_the_same_recorded_verdict_on_both_paths(fault):
    policy = RetryPolicy(max_retries=1, backoff=0.0, max_backoff=0.0)
    with FakeOpenAI(lambda body, n: fault) as fake:
        judge = judge_on(fake, timeout=5.0)
        direct = judge.direct_call()
        slow = judge_verdict(judge, TEXTS[0], policy)
        fast = asyncio.run(ajudge_verdict(direct, TEXTS[0], policy))
    assert slow.abstained and fast.abstained
    assert (fast.error_kind, fast.attempts, fast.passed) == (slow.error_kind, slow.attempts, slow.passed)
    # The same message but for the HTTP library's own words after the error's class (aiohttp on the fast
    # path, httpx on DSPy's): "LMTransportError: <url>: <library error>".
    if fault == "drop":
        assert fast.error.split(": ")[:2] == slow.error.split(": ")[:2] and "disconnected" in fast.error
    else:
        assert fast.error == slow.error


def test_judge_stream_takes_the_fast_path_and_writes_what_the_thread_path_writes(tmp_path):
    data = make_dataset(30)
    with FakeOpenAI(answer) as fake:
        lm = make_lm(LMConfig(model="fake-judge@1", api_base=fake.api_base))
        judge = TrajectoryJudge(render_config=RenderConfig.of(SERVER))
        fast = judge_stream(judge, data, tmp_path / "fast.jsonl", lm=lm, concurrency=8, progress=False)
        # The same judge with a DSPy callback cannot take the fast path (the callback would see nothing).
        with dspy.context(callbacks=[dspy.utils.callback.BaseCallback()]):
            slow = judge_stream(judge, data, tmp_path / "slow.jsonl", lm=lm, concurrency=8, progress=False)
        bodies = fake.requests
    assert fast.fast_path and not slow.fast_path
    assert fast.judged == slow.judged == 30 and fast.lm_calls == slow.lm_calls == 30
    assert fast.tokens == slow.tokens and fast.tokens["prompt_tokens"] > 0
    by_id = {line["id"]: line for line in read_lines(tmp_path / "slow.jsonl")}
    lines = read_lines(tmp_path / "fast.jsonl")
    assert sorted(line["id"] for line in lines) == sorted(t.id for t in data)
    for line in lines:
        other = by_id[line["id"]]
        assert {k: v for k, v in line.items() if k != "wall_s"} == {k: v for k, v in other.items() if k != "wall_s"}
    assert sorted(r["raw"] for r in bodies[:30]) == sorted(r["raw"] for r in bodies[30:])


def test_callbacks_set_on_the_judge_see_every_call_of_a_batch(tmp_path):
    """DSPy drops a module's own callbacks when it copies one; batch judging works on a copy, so the judge's
    `deepcopy` keeps them (and the batch, seeing them, leaves the fast path, whose calls they could not see)."""

    class Seen(dspy.utils.callback.BaseCallback):
        def __init__(self):
            self.judge_calls, self.predict_calls = 0, 0

        def on_module_start(self, call_id, instance, inputs):
            self.judge_calls += isinstance(instance, TrajectoryJudge)
            self.predict_calls += isinstance(instance, dspy.Predict)

    data = make_dataset(12)
    seen = Seen()
    with FakeOpenAI(answer) as fake:
        lm = make_lm(LMConfig(model="fake-judge@1", api_base=fake.api_base))
        judge = TrajectoryJudge(render_config=RenderConfig.of(SERVER))
        judge.callbacks, judge.judge.callbacks = [seen], [seen]
        assert judge.deepcopy().judge.callbacks == [seen]
        summary = judge_stream(judge, data, tmp_path / "v.jsonl", lm=lm, concurrency=4, progress=False)
    assert summary.judged == 12 and not summary.fast_path
    assert seen.judge_calls == 12 and seen.predict_calls == 12


def test_no_fast_path_for_an_lm_it_cannot_reproduce():
    with FakeOpenAI(answer) as fake:
        cached = TrajectoryJudge()
        cached.set_lm(make_lm(LMConfig(model="fake-judge@1", api_base=fake.api_base, cache=True)))
        assert cached.direct_call() is None  # DSPy's response cache could answer instead of the server
        assert judge_on(fake).direct_call() is not None
    scripted = TrajectoryJudge()
    scripted.set_lm(ScriptedLM([{"reason": "r", "passed": True, "score": 0.9}]))
    assert scripted.direct_call() is None

    class Custom(TrajectoryJudge):
        def forward(self, trajectory):
            return super().forward(trajectory)

    with FakeOpenAI(answer) as fake:
        custom = judge_on(fake)
        custom.__class__ = Custom
        assert custom.direct_call() is None


def test_the_strict_parse_returns_what_dspys_json_parse_returns_for_every_field_type():
    """The strict adapter skips DSPy's per-field pydantic validation when a value already has its field's
    plain type; the fields (values, types and order) must be DSPy's own, and anything else DSPy decides.
    A value of another JSON type is refused (``invalid``) where DSPy would coerce it ("true" -> True)."""
    adapter = StrictJSONAdapter()
    signature = TrajectoryJudge().judge.signature
    values = {"reason": ["x", "", "é\n", 3, None, True], "passed": [True, False, "true", 1, None, 2.5],
              "score": [0.5, 1, -3, float("nan"), "0.7", True, None, 2 ** 60, "abc"]}
    compared = refused = 0
    for reason, passed, score in itertools.product(*values.values()):
        text = json.dumps({"score": score, "extra": 1, "reason": reason, "passed": passed})
        if not (type(reason) is str and type(passed) is bool and type(score) in (int, float)):
            with pytest.raises(VerdictFormatError) as refusal:
                adapter.parse(signature, text)
            assert refusal.value.kind == "invalid"
            refused += 1
            continue
        try:
            expected = dspy.JSONAdapter.parse(adapter, signature, text)
        except Exception:  # noqa: BLE001 - DSPy refuses it: the strict parse must refuse it too
            with pytest.raises(VerdictFormatError):
                adapter.parse(signature, text)
            continue
        got = adapter.parse(signature, text)
        assert repr(list(got.items())) == repr(list(expected.items()))
        assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]
        compared += 1
    assert compared > 20 and refused == 6 * 6 * 9 - 3 * 2 * 5  # all but the 30 of plain types


def test_a_verdict_field_of_the_wrong_type_is_an_invalid_answer_never_coerced():
    """User sees: an LM that answers ``"passed": "true"`` (a string) or ``"score": "0.9"`` gets an
    ``invalid`` abstention (a fail, counted by kind), not a pass; before, DSPy coerced both."""
    adapter = StrictJSONAdapter()
    signature = TrajectoryJudge().judge.signature
    for answer, field in (({"reason": "ok", "passed": "true", "score": 0.9}, "passed"),
                          ({"reason": "ok", "passed": True, "score": "0.9"}, "score"),
                          ({"reason": "ok", "passed": 1, "score": 0.9}, "passed")):
        with pytest.raises(VerdictFormatError) as refusal:
            adapter.parse(signature, json.dumps(answer))
        assert refusal.value.kind == "invalid" and str(refusal.value).count(field)
    policy = RetryPolicy(max_retries=0, backoff=0.0, max_backoff=0.0)
    with FakeOpenAI(lambda body, n: {"reason": "looks fine", "passed": "true", "score": 0.9}) as fake:
        judge = judge_on(fake)
        slow = judge_verdict(judge, TEXTS[0], policy)
        fast = asyncio.run(ajudge_verdict(judge.direct_call(), TEXTS[0], policy))
    for verdict in (slow, fast):
        assert (verdict.passed, verdict.abstained, verdict.error_kind) == (False, True, "invalid")
        assert "passed must be true or false" in verdict.error


def test_a_timeout_is_a_timeout_abstention_on_both_paths():
    """aiohttp's timeout on the fast path is DSPy's timeout error, as httpx's is on DSPy's path: retried,
    then recorded as an abstention of kind ``timeout`` naming the URL."""
    policy = RetryPolicy(max_retries=1, backoff=0.0, max_backoff=0.0)
    with FakeOpenAI(lambda body, n: "timeout", hang_seconds=3.0) as fake:
        judge = judge_on(fake, timeout=0.5)
        direct = judge.direct_call()
        slow = judge_verdict(judge, TEXTS[0], policy)
        fast = asyncio.run(ajudge_verdict(direct, TEXTS[0], policy))
    assert (fast.abstained, fast.error_kind, fast.attempts) == (slow.abstained, slow.error_kind, slow.attempts) \
        == (True, "timeout", 2)
    assert fast.error.split(": ")[:2] == slow.error.split(": ")[:2]  # the error's class and the URL


def test_an_interrupt_from_the_input_stops_the_fast_path_and_a_rerun_completes(tmp_path):
    """A KeyboardInterrupt raised by the input iterator (it runs on the event loop's thread) reaches the
    caller at once, with the verdicts already finished kept; the re-run judges the rest, one line per id."""
    data = make_dataset(8)
    out = tmp_path / "v.jsonl"

    def interrupted():
        yield from data[:5]
        raise KeyboardInterrupt

    with FakeOpenAI(answer, delay=0.2) as fake:
        lm = make_lm(LMConfig(model="fake-judge@1", api_base=fake.api_base))
        with pytest.raises(KeyboardInterrupt):
            judge_stream(TrajectoryJudge(), interrupted(), out, lm=lm, concurrency=2, progress=False)
        kept = {line["id"] for line in read_lines(out)}
        summary = judge_stream(TrajectoryJudge(), data, out, lm=lm, concurrency=2, progress=False)
    assert summary.fast_path and kept <= {t.id for t in data[:5]}
    assert (summary.resumed, summary.judged) == (len(kept), 8 - len(kept))
    assert sorted(line["id"] for line in read_lines(out)) == sorted(t.id for t in data)


CTRL_C = """
import sys
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from tests.support.helpers import make_dataset
lm = make_lm(LMConfig(model="fake-judge@1", api_base=sys.argv[1], timeout=600.0))
try:
    judge_stream(TrajectoryJudge(), make_dataset(40), sys.argv[2], lm=lm, concurrency=4, progress=False)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_ctrl_c_while_the_loop_judges_keeps_finished_lines_and_a_rerun_completes(tmp_path):
    """SIGINT reaches the waiting main thread while the batch runs on the loop's thread: the run stops at
    once (the calls in flight are not waited for), every line written is whole, the re-run completes.

    No timing: the server answers the first 4 calls and holds every later one until the test releases it,
    so the child is judging (4 lines written, calls in flight that will not end by themselves) when SIGINT
    is sent, and it can only exit by giving up those calls (their timeout is 600 s)."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    answered, release = 4, threading.Event()

    def held(body, n):
        if n >= answered:
            release.wait(timeout=600)
        return answer(body, n)

    out = tmp_path / "v.jsonl"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with FakeOpenAI(held) as fake:
        try:
            child = subprocess.Popen([sys.executable, "-c", CTRL_C, fake.api_base, str(out)], env=env, cwd=root)
            try:
                deadline = time.time() + 300  # a bound for a broken child, not a timing assumption
                while not (fake.n_requests > answered and out.exists() and out.read_bytes().count(b"\n") == answered):
                    assert child.poll() is None, "the child ended before it was interrupted"
                    assert time.time() < deadline, "the child never had 4 lines written and a call held"
                    time.sleep(0.02)
                child.send_signal(signal.SIGINT)
                assert child.wait(timeout=300) == 130
            finally:
                if child.poll() is None:
                    child.kill()
        finally:
            release.set()
        kept = read_lines(out)  # whole lines only: each parses
        assert len({line["id"] for line in kept}) == len(kept) == answered
        assert not any(line["abstained"] for line in kept)  # the calls given up are not written as verdicts
        lm = make_lm(LMConfig(model="fake-judge@1", api_base=fake.api_base))
        summary = judge_stream(TrajectoryJudge(), make_dataset(40), out, lm=lm, concurrency=4, progress=False)
    assert (summary.resumed, summary.judged) == (answered, 40 - answered)
    assert sorted(line["id"] for line in read_lines(out)) == sorted(t.id for t in make_dataset(40))
