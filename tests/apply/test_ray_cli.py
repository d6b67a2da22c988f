"""`rubricforge judge --ray` as a user runs it: a local Ray instance, two fake servers round-robin, one verdict
per id, the same job as a local run (a re-run resumes, nothing asked again); several --api-base without --ray
are refused before any LM call."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rubricforge_dspy.data.formats.jsonl import to_record
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.helpers import REPO, make_dataset


def _run(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RAY_ADDRESS": ""}
    return subprocess.run([sys.executable, "-m", "rubricforge_dspy", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def _data(tmp_path, n):
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(to_record(t, reward=t.reward, label=t.label)) + "\n" for t in make_dataset(n)))
    return path


@pytest.mark.slow
def test_several_api_base_without_ray_are_refused(tmp_path):
    with FakeOpenAI() as a:
        result = _run("judge", "--data", str(_data(tmp_path, 3)), "--out", str(tmp_path / "v.jsonl"),
                      "--api-base", a.api_base, "--api-base", a.api_base + "/x", "--model", a.model)
        assert a.n_requests == 0
    assert result.returncode == 2 and "--api-base given 2 times" in result.stderr


@pytest.mark.slow
def test_judge_ray_two_servers_one_verdict_per_id_and_resume(tmp_path):
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'rubricforge-dspy[ray]'")
    data, out = _data(tmp_path, 20), tmp_path / "verdicts.jsonl"
    with FakeOpenAI() as a, FakeOpenAI() as b:
        common = ("judge", "--data", str(data), "--out", str(out), "--model", a.model, "--concurrency", "4")
        # A job started locally on one endpoint ...
        local = _run(*common, "--api-base", a.api_base, "--limit", "5", "--no-cache")
        assert local.returncode == 0, local.stderr[-3000:]
        assert a.n_requests == 5
        # ... resumes on Ray with that endpoint (the same job fingerprint), and a second one added later
        # would be another job: here one endpoint, then both for a fresh output.
        resumed = _run(*common, "--api-base", a.api_base, "--ray", "--ray-workers", "2")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert a.n_requests == 20 and b.n_requests == 0
        assert "resumed 5 " in resumed.stderr  # the 5 judged locally, counted without running Dataset.count()
        ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
        assert len(ids) == 20 == len(set(ids))

        pooled = tmp_path / "pooled.jsonl"
        args = ("judge", "--data", str(data), "--out", str(pooled), "--api-base", a.api_base, "--api-base",
                b.api_base, "--model", a.model, "--ray", "--ray-workers", "2", "--concurrency", "4")
        first = _run(*args)
        assert first.returncode == 0, first.stderr[-3000:]
        assert b.n_requests > 0 and a.n_requests > 20 and a.n_requests + b.n_requests == 40  # round-robin
        ids = [json.loads(line)["id"] for line in pooled.read_text().splitlines()]
        assert len(ids) == 20 == len(set(ids))
        again = _run(*args)
        assert again.returncode == 0 and a.n_requests + b.n_requests == 40
        assert "nothing to do: all 20 item(s) were judged already" in again.stderr
