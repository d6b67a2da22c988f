"""A plain program's run on Ray is a run of the one job runner (issue 42 item 2: `run_judge_file` with
`apply.ray.RayCalls`, and `judge_dataset` a thin wrapper over `run_job`): on a real local Ray cluster against the fake
OpenAI-compatible server, it writes exactly the lines a local run writes on the same items (ids, verdicts, evidence,
tokens), the checking pass's spilled items included (refused before), and a run stopped by a dead server resumes
asking only for the rest."""

from __future__ import annotations

import hashlib
import json

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'rubricforge-dspy[ray]'")
pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'rubricforge-dspy[ray]'")

from rubricforge_dspy.apply.options import JobOptions  # noqa: E402
from rubricforge_dspy.apply.ray import RayCalls, judge_dataset, trajectory_dataset  # noqa: E402
from rubricforge_dspy.apply.stream import run_judge_file  # noqa: E402
from rubricforge_dspy.data.formats import load_trajectories  # noqa: E402
from rubricforge_dspy.lm.circuit import JudgeUnavailableError  # noqa: E402
from rubricforge_dspy.lm.config import LMConfig  # noqa: E402
from rubricforge_dspy.lm.engine import make_lm  # noqa: E402
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS  # noqa: E402
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text  # noqa: E402
from tests.support.helpers import AIRLINE  # noqa: E402

N = 10
COMPARED = ("id", "task_id", "n_steps", "passed", "score", "reason", "abstained", "error_kind", "contradiction",
            "label", "reward", "evidence", "tokens", "attempts", "judge_fingerprint", "program_sha256", "model")


def responder(body, n):
    """A reply that depends on the trajectory only (not on arrival order or the back end)."""
    pick = int(hashlib.sha256(user_text(body).encode()).hexdigest(), 16) % 5
    return [{"reason": "Booked.", "passed": True, "score": 0.9},
            {"reason": "The tool returned an error.", "passed": False, "score": 0.2},
            {"reason": "Odd.", "passed": True, "score": 0.1},
            Reply(content='{"reason": "cut', finish_reason="length"),
            "garbage"][pick]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024, log_to_driver=False)
    yield
    ray.shutdown()


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _said(path):
    return {line["id"]: {key: line.get(key) for key in COMPARED} for line in _lines(path)}


def _config(fake) -> LMConfig:
    return LMConfig(model=fake.model, api_base=fake.api_base, max_tokens=128)


@pytest.mark.slow
def test_a_plain_ray_run_writes_the_lines_of_a_local_run(cluster, tmp_path):
    local, on_ray, dataset = (tmp_path / name / "v.jsonl" for name in ("local", "ray", "dataset"))
    with FakeOpenAI(responder) as fake:
        config = _config(fake)
        run_judge_file(None, AIRLINE, local, lm=make_lm(config), limit=N, cache=False, progress=False)
        asked = fake.n_requests
        # files: the checking pass spills each item's rendered inputs, which the Ray workers judge
        calls = RayCalls(config, options=JobOptions(concurrency=3), workers=2, batch_size=4)
        summary = run_judge_file(None, AIRLINE, on_ray, lm=calls.job_lm(), calls=calls, limit=N, cache=False,
                                 progress=False)
        assert fake.n_requests == 2 * asked == 2 * N
        # a user's own Ray Dataset, through the same runner
        rows = trajectory_dataset(load_trajectories(AIRLINE)[:N], rows_per_block=3)
        again = judge_dataset(rows, None, out=dataset, lm_config=config, workers=1, concurrency=2, batch_size=4)
        assert fake.n_requests == 3 * N
    assert _said(on_ray) == _said(local) == _said(dataset)  # the same job, the same lines (evidence, tokens)
    lines = _lines(on_ray)
    assert all(line["evidence"] is not None for line in lines)
    assert any(line.get("tokens") for line in lines) and len({line["error_kind"] for line in lines}) >= 2
    assert summary.judged == again.judged == N and summary.fast_path and summary.lm_calls == N
    assert summary.tokens is not None and summary.tokens["prompt_tokens"] > 0


@pytest.mark.slow
def test_a_plain_ray_run_stopped_by_a_dead_server_resumes_asking_only_for_the_rest(cluster, tmp_path):
    out = tmp_path / "v.jsonl"
    ok = {"reason": "Booked.", "passed": True, "score": 0.9}
    with FakeOpenAI(lambda body, n: ok if n < 6 else "http_500") as fake:
        # the run's circuit (the driver's, checked after each batch that comes back) stops it: the batches already
        # back are written whatever Ray still runs
        calls = RayCalls(_config(fake), options=JobOptions(concurrency=1, max_retries=0,
                                                           max_consecutive_lm_errors=None), workers=1, batch_size=4)
        with pytest.raises(JudgeUnavailableError, match="consecutive"):
            run_judge_file(None, AIRLINE, out, lm=calls.job_lm(), calls=calls, limit=N, progress=False,
                           max_retries=0, max_consecutive_lm_errors=2)
        first = _lines(out) if out.exists() else []
        done = {line["id"] for line in first if not (line["abstained"] and line["error_kind"] in LM_ERROR_KINDS)}
        # Ray may hand the actor several batches at once, so which batch comes back first (and opens the circuit)
        # is Ray's scheduling: how many answered lines precede the stop is not fixed, only that it stopped short
        assert len(done) < N
        fake.responder = lambda body, n: ok  # the server is fixed; the same command again
        asked = fake.n_requests
        calls = RayCalls(_config(fake), options=JobOptions(concurrency=2), workers=1)
        summary = run_judge_file(None, AIRLINE, out, lm=calls.job_lm(), calls=calls, limit=N, progress=False)
        assert fake.n_requests - asked == N - len(done)  # only the rest was asked
    ids = [line["id"] for line in _lines(out)]
    assert len(ids) == len(set(ids)) == N and done <= set(ids)
    assert summary.resumed == len(done) and summary.judged == N - len(done)


class _ScriptedProcessor:
    """What `sglang_processor` builds, with a scripted engine in place of SGLang (no GPU): the judge's own preprocess
    step (`JudgePrompt`), an engine step answering by the episode, and the strict postprocess step (`JudgeAnswer`)."""

    def __init__(self, judge, lm):
        from rubricforge_dspy.apply.ray import JudgeAnswer, JudgePrompt
        from rubricforge_dspy.apply.ray_data import job_line

        self.rubricforge_job = {"judge": judge, "lm": lm}
        self.prompt, self.answer = JudgePrompt(judge, max_tokens=64), JudgeAnswer(judge, 64, job_line(judge, lm))

    def __call__(self, ds):
        return ds.map(self.prompt).map(_engine).map(self.answer)


def _engine(row):
    passed = "HAT001" in row["messages"][-1]["content"]
    text = json.dumps({"reason": "scripted", "passed": passed, "score": 0.9 if passed else 0.1})
    return {**row, "generated_text": text, "num_generated_tokens": 12}


@pytest.mark.slow
def test_the_in_ray_processor_runs_through_the_job_runner(cluster, tmp_path):
    from rubricforge_dspy.apply.ray_sglang import SGLANG_ENDPOINT
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from tests.support.helpers import make_dataset

    judge = TrajectoryJudge()
    processor = _ScriptedProcessor(judge, make_lm(LMConfig(model="m@r", api_base=SGLANG_ENDPOINT, max_tokens=64)))
    trajectories = make_dataset(8)
    out = tmp_path / "v.jsonl"
    summary = judge_dataset(trajectory_dataset(trajectories), None, out=out, processor=processor)
    lines = {line["id"]: line for line in _lines(out)}
    assert sorted(lines) == sorted(t.id for t in trajectories) and summary.judged == 8 and summary.lm_calls == 8
    assert [lines[t.id]["passed"] for t in trajectories] == [t.id.startswith("synthetic:t1:") for t in trajectories]
    assert all(line["judge_fingerprint"] == summary.judge_fingerprint for line in lines.values())
    again = judge_dataset(trajectory_dataset(trajectories), None, out=out, processor=processor)
    assert (again.judged, again.resumed) == (0, 8)
