"""Judging on Ray Data against SIMULATED judge servers: 1, 2 and 4 Ray workers x 1, 2 and 4 servers.

    PYTHONPATH=. python -m evals.bench_ray [--n 400] [--speedup 2] [--workers 1 2 4] [--servers 1 2 4]
        [--label s4] [--path auto|threads]

The shipped trajectories repeated with distinct ids to `--n`; for each number of servers, that many
simulator processes (evals/simulator, one simulated GPU each); for each number of Ray workers,
`rubricforge_dspy.apply.ray.judge_dataset` on a local Ray instance (``ray.init(num_cpus=4)``: 4 logical
CPUs on this 2-core machine, so 4 workers can be placed), the endpoints round-robin, concurrency
`--concurrency` per worker. Reported per run:

- verdicts/s over the judging wall time (Ray Dataset execution included; Ray's start is not), and as a
  fraction of the servers' combined limit (N x one server's limit from the performance model with every
  request queued, `model.run_all_queued`, at the same speedup, as evals/bench_saturation.py computes it);
- the same over the steady state (from the moment 25% of the lines are written to the end: every
  worker has started, so their start-up is left out);
- client CPU per verdict: CPU seconds (user + sys) of every process of the Ray instance this benchmark
  started (driver, raylet, GCS, the workers; simulators excluded), sampled every 0.2 s (a process that
  exits between samples loses at most its last 0.2 s), and of the judging workers alone (whole run and
  steady state);
- whether the workers judged on the fast path (``summary.fast_path``: `TrajectoryJudge.direct_call` on one
  event loop per worker) or on threads (``--path threads`` forces the thread path with the same judge: a
  subclass whose ``forward`` calls the parent's, so `direct_call` is None).

Writes evals/results/ray_scale.json; with ``--label``, the runs are merged under ``labels[LABEL]`` and the
file's other content (the first runs, at its top level: the thread path before the fast path) is kept.
Simulated: never a real GPU; this machine's 2 cores run the simulators, the driver and the workers at
once, so the fractions are what 2 cores allow.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from evals.simulator import harness
from evals.simulator.model import GpuModel, SimRequest, estimate_tokens, run_all_queued
from evals.simulator.server import DEFAULT_MODEL_NAME, answer, prompt_text

WORKERS = "_JudgeWorker"  # in the process title of every judging Ray worker


class TreeCPU:
    """CPU seconds of this process and its descendants, minus `exclude`d pids, sampled in a thread."""

    def __init__(self, exclude: set[int], out: Path | None = None):
        self.exclude = exclude
        self.out = out
        self.last: dict[int, tuple[float, str]] = {}
        self.start: dict[int, float] = {}
        self.samples: list[tuple[float, int, float, float]] = []  # (time, lines, CPU so far, workers' CPU so far)
        self._stop = threading.Event()

    def _sample(self) -> None:
        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            if process.pid in self.exclude:
                continue
            try:
                times = process.cpu_times()
                name = " ".join(process.cmdline()[:1])
            except psutil.Error:
                continue
            self.last[process.pid] = (times.user + times.system, name)
        if self.start and self.out is not None:
            lines = self.out.read_bytes().count(b"\n") if self.out.exists() else 0
            self.samples.append((time.perf_counter(), lines, self.total(), self.total(WORKERS)))

    def __enter__(self) -> "TreeCPU":
        self._sample()
        self.start = {pid: cpu for pid, (cpu, _) in self.last.items()}
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def total(self, match: str = "") -> float:
        return sum(cpu - self.start.get(pid, 0.0) for pid, (cpu, name) in self.last.items() if match in name)

    def steady(self, fraction: float = 0.25) -> dict:
        """Verdicts/s and CPU per verdict from the sample where `fraction` of the final lines were written to
        the last: every worker has started by then (their start-up, importing DSPy, is left out)."""
        final = self.samples[-1][1] if self.samples else 0
        first = next((s for s in self.samples if s[1] >= fraction * final), None)
        last = self.samples[-1] if self.samples else None
        if first is None or last is None or last[1] <= first[1] or last[0] <= first[0]:
            return {"verdicts_per_s": None, "client_cpu_ms_per_verdict": None,
                    "judge_workers_cpu_ms_per_verdict": None, "lines": 0}
        lines = last[1] - first[1]
        return {"verdicts_per_s": round(lines / (last[0] - first[0]), 3),
                "client_cpu_ms_per_verdict": round(1000 * (last[2] - first[2]) / lines, 3),
                "judge_workers_cpu_ms_per_verdict": round(1000 * (last[3] - first[3]) / lines, 3), "lines": lines}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--speedup", type=float, default=2.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--concurrency", type=int, default=32, help="judge calls in flight per Ray worker")
    parser.add_argument("--out", default=str(harness.ROOT / "evals" / "results" / "ray_scale.json"))
    parser.add_argument("--label", default=None, help="merge the runs under labels[LABEL] of --out (kept otherwise)")
    parser.add_argument("--path", choices=("auto", "threads"), default="auto",
                        help="auto: the fast path when the judge offers it (the plain judge does); threads: force "
                             "the thread path with the same judge")
    args = parser.parse_args(argv)
    import ray

    from rubricforge_dspy.apply.ray import judge_dataset, trajectory_dataset
    from rubricforge_dspy.judge.module import TrajectoryJudge

    class ThreadPathJudge(TrajectoryJudge):
        """The plain judge, its ``forward`` overridden (calling the parent's): no fast path."""

        def forward(self, trajectory):
            return super().forward(trajectory=trajectory)
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.lm.config import LMConfig

    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    data = work / "trajectories.jsonl"
    dataset = harness.write_repeated(args.n, data)
    bodies = harness.capture_bodies(data, DEFAULT_MODEL_NAME)
    model = GpuModel()
    one_limit = run_all_queued([SimRequest.from_prompt(prompt_text(b), estimate_tokens(answer(b)[1]))
                                for b in bodies], model).throughput * args.speedup
    trajectories = list(load_trajectories(data))
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024 * 1024)
    runs = []
    try:
        for n_servers in args.servers:
            for n_workers in args.workers:
                sims = [harness.start_simulator("--speedup", str(args.speedup)) for _ in range(n_servers)]
                out = work / f"verdicts-s{n_servers}-w{n_workers}.jsonl"
                config = LMConfig(model=DEFAULT_MODEL_NAME, api_base=sims[0].api_base, max_tokens=256)
                ds = trajectory_dataset(trajectories, rows_per_block=32)
                load_before = harness.load_avg()
                with TreeCPU(exclude={s.proc.pid for s in sims}, out=out) as cpu:
                    judge = ThreadPathJudge() if args.path == "threads" else None
                    summary = judge_dataset(ds, judge, out=out, lm_config=config,
                                            api_bases=[s.api_base for s in sims], workers=n_workers,
                                            concurrency=args.concurrency, batch_size=32)
                servers = [s.stop() for s in sims]
                limit = one_limit * n_servers
                row = {
                    "servers": n_servers, "ray_workers": n_workers, "concurrency_per_worker": args.concurrency,
                    "judged": summary.judged, "abstained": summary.n_abstained, "fast_path": summary.fast_path,
                    "wall_s": round(summary.wall_time, 3), "verdicts_per_s": round(summary.throughput, 3),
                    "servers_combined_limit_per_s": round(limit, 3),
                    "fraction_of_combined_limit": round(summary.throughput / limit, 4),
                    "client_cpu_s": round(cpu.total(), 3),
                    "client_cpu_ms_per_verdict": round(1000 * cpu.total() / max(1, summary.judged), 3),
                    "judge_workers_cpu_ms_per_verdict": round(1000 * cpu.total(WORKERS) / max(1, summary.judged), 3),
                    "steady_state": {**cpu.steady(), "window": "from 25% of the lines written to the last"},
                    "steady_fraction_of_combined_limit": (round(cpu.steady()["verdicts_per_s"] / limit, 4)
                                                          if cpu.steady()["verdicts_per_s"] else None),
                    "per_server_finished": [sum(e["finished"] for e in s.get("engines", [])) for s in servers],
                    "server_cpu_s": [s.get("server_cpu_s") for s in servers],
                    "load_avg_before": load_before, "load_avg_after": harness.load_avg(),
                }
                runs.append(row)
                print(f"[ray] {n_servers} servers x {n_workers} workers: {row['verdicts_per_s']:.1f}/s = "
                      f"{row['fraction_of_combined_limit']:.3f} of {limit:.0f}/s; "
                      f"{row['client_cpu_ms_per_verdict']:.1f} "
                      f"ms client CPU per verdict (steady: {row['steady_state']})", file=sys.stderr)
    finally:
        ray.shutdown()
    run_set = {
        "path": args.path, "code": _commit(), "concurrency_per_worker": args.concurrency,
        "benchmark": "judging on Ray Data (evals/bench_ray.py)", "lm": harness.LM_LABEL, "simulated": True,
        "machine": {**harness.machine(), "ray": ray.__version__,
                    "ray_logical_cpus": 4, "what_the_cores_allow": "2 cores run the simulators, the Ray driver, "
                    "raylet/GCS and every judging worker at once: more workers or servers than cores compete for the "
                    "same 2 cores, so these fractions are bounds of this machine, not of Ray"},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "speedup": args.speedup,
        "speedup_note": f"real time = modelled GPU time / {args.speedup}",
        "one_server_limit_per_s": round(one_limit, 3), "dataset": dataset, "runs": runs,
        "cpu_note": "client CPU = every process of the local Ray instance (driver, raylet, GCS, workers), simulators "
                    "excluded, sampled every 0.2 s; Ray's own start-up before the run is excluded; "
                    "the whole-run figures include the workers' start-up (importing DSPy, seconds of CPU each), "
                    "the steady_state ones do not",
        "steady_note": "steady_state starts when 25% of the lines are written; the requests already in flight then "
                       "(up to workers x concurrency) finish inside the window, so its verdicts/s is biased upward and "
                       "can exceed the all-queued limit; its CPU per verdict is the number to model client cores with",
        "wall_time_s": round(time.time() - started, 1),
    }
    out_path = Path(args.out)
    if args.label is None:
        result = run_set
    else:
        result = json.loads(out_path.read_text()) if out_path.exists() else {}
        result.setdefault("labels_note", "labels[...]: later run sets, each complete (machine, date, runs); the "
                          "top-level runs, if any, are the first one (the thread path, before the fast path)")
        result.setdefault("labels", {})[args.label] = run_set
    harness.write_json(out_path, result)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=harness.ROOT, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    sys.exit(main())
