"""Shared pieces of the benchmarks that run against the simulated server: start/stop it as a separate
process (so the client's CPU is measured apart from the server's), the shipped data repeated to N
distinct ids, the exact request bodies the judge sends, the ideal client, and the machine's description.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "evals" / "data"
SHIPPED = [  # (file, label threshold): every shipped trajectory file
    (DATA / "tau_bench_official" / "gpt-4o-airline.json", 0.0),
    (DATA / "tau_bench_grok" / "tool-calling-grok-4-fast-reasoning-0.0_range_0--1_user-grok-4-fast-reasoning-llm_"
     "1129144541.json", 0.0),
    (DATA / "react_webshop" / "react_webshop_davinci002_500.jsonl", 0.999),
    (DATA / "adapt" / "ADaPT_maxd3_webshop_gpt-3.5-turbo.json", 0.0),
]
LM_LABEL = "simulated 7B judge (evals/simulator)"


def env() -> dict:
    """The environment for subprocesses: this checkout first on PYTHONPATH, offline LiteLLM."""
    out = dict(os.environ)
    out["PYTHONPATH"] = str(ROOT) + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    out["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return out


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "system": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version(),
            "note": "2 vCPU VM shared with ~7 other agents' jobs; load average recorded per run"}


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


@dataclass
class SimProcess:
    proc: subprocess.Popen
    api_base: str

    @property
    def url(self) -> str:
        return self.api_base[: -len("/v1")]

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/sim/stats", timeout=30).json()

    def stop(self) -> dict:
        """Stop the server; returns its final stats and its CPU seconds (user + sys)."""
        try:
            stats = self.stats()
        except httpx.HTTPError as error:  # a server that died (fault injection) no longer listens
            stats = {"stats_unavailable": f"{type(error).__name__}: {error}"}
        self.proc.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        stats["server_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 3)
        return stats


def start_simulator(*args: str, timeout: float = 60.0) -> SimProcess:
    """``python -m evals.simulator --port 0 ARGS`` in its own process; waits for its endpoint line."""
    proc = subprocess.Popen([sys.executable, "-m", "evals.simulator", "--port", "0", *args],
                            stdout=subprocess.PIPE, text=True, env=env(), cwd=ROOT)
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"api_base=(\S+)", line)
        if match:
            return SimProcess(proc, match[1])
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"the simulator did not start: {line!r}")


def run_measured(cmd: list[str], timeout: float | None = None) -> dict:
    """Run `cmd`; returns its exit code, wall time, stdout and stderr (its CPU: wrap the call in `ChildCPU`)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    wall = time.perf_counter() - started
    return {"returncode": proc.returncode, "wall_s": round(wall, 3), "stdout": out, "stderr": err}


class ChildCPU:
    """CPU seconds of children reaped while the block runs (RUSAGE_CHILDREN delta)."""

    def __enter__(self) -> "ChildCPU":
        self._start = resource.getrusage(resource.RUSAGE_CHILDREN)
        return self

    def __exit__(self, *exc) -> None:
        end = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.user = end.ru_utime - self._start.ru_utime
        self.sys = end.ru_stime - self._start.ru_stime

    @property
    def total(self) -> float:
        return self.user + self.sys


# -- data ----------------------------------------------------------------------------------------------

def shipped_trajectories():
    from rubricforge_dspy.data.formats import load_trajectories

    out = []
    for path, threshold in SHIPPED:
        trajectories = load_trajectories(path, label_threshold=threshold)
        out.extend(trajectories)
    return out


def write_repeated(n: int, path: Path) -> dict:
    """The shipped trajectories, repeated with distinct ids (``<id>#copyK``) until there are `n`, as one
    generic-format JSONL file. Returns what was written."""
    from rubricforge_dspy.data.formats.jsonl import to_record

    base = shipped_trajectories()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for i in range(n):
            t = base[i % len(base)]
            record = to_record(t, reward=t.reward, label=t.label)
            record["id"] = f"{t.id}#copy{i // len(base)}"
            out.write(json.dumps(record) + "\n")
    return {"distinct_shipped": len(base), "total": n, "copies": -(-n // len(base)),
            "note": f"{len(base)} shipped trajectories (4 files), repeated in order with distinct ids to {n}"}


def capture_bodies(data_path: Path, model_name: str, render_tokens: int | None = None) -> list[dict]:
    """The exact chat bodies `rubricforge judge --preset server` sends for `data_path`, recorded by the
    project's fake server (sequentially, in file order)."""
    import dspy

    from rubricforge_dspy.core.presets import SERVER
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing.fake_server import FakeOpenAI

    trajectories = load_trajectories(data_path)
    render = RenderConfig.of(SERVER) if render_tokens is None else RenderConfig(max_tokens=render_tokens,
                                                                                max_step_chars=SERVER.step_chars)
    judge = TrajectoryJudge(render_config=render)
    with FakeOpenAI(keep_alive=True) as fake:
        lm = make_lm(LMConfig(model=model_name, api_base=fake.api_base))
        with dspy.context(lm=lm):
            for trajectory in trajectories:
                judge(trajectory=trajectory)
        return fake.chat_bodies


def ideal_client(api_base: str, bodies: list[dict], timeout: float = 3600.0) -> dict:
    """Post every body at once (one connection each) and wait for all: the ideal client."""
    import aiohttp

    async def run() -> tuple[float, int]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async def one(body):
                async with session.post(f"{api_base}/chat/completions", json=body) as reply:
                    await reply.read()
                    return reply.status == 200

            started = time.perf_counter()
            results = await asyncio.gather(*(one(body) for body in bodies))
            return time.perf_counter() - started, sum(results)

    wall, ok = asyncio.run(run())
    return {"requests": len(bodies), "ok": ok, "wall_s": round(wall, 3),
            "throughput_per_s": round(len(bodies) / wall, 3)}


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
