"""Client CPU per verdict and verdicts/s of `rubricforge judge` against the SIMULATED server (evals/simulator).

    PYTHONPATH=. python -m evals.bench_client_cpu --label after [--n 1000 10000] [--concurrency 64 256]
    PYTHONPATH=. python -m evals.bench_client_cpu --label before --code /tmp/checkout-of-the-old-commit

For each input size and concurrency: a fresh simulator process (fast: ``--speedup``, so the client, not
the simulated GPU, is what limits throughput), then ``rubricforge judge --preset server --concurrency C
--no-cache`` as a subprocess running the code in ``--code`` (default: this checkout). Measured:

- ``client_cpu_ms_per_verdict``: user + sys CPU of that whole process (interpreter start, imports, the
  whole-input check and the JSONL loading included) divided by the verdicts written;
- ``ingest_cpu_ms_per_item``: the CPU of ``rubricforge stats`` on the same file (the same loader), the
  part of the above that reading the input costs (issue 20, item 1, works on it);
- ``throughput_per_s``: verdicts over the batch's own wall time, as the command prints it;
- ``render_cpu_ms_per_trajectory_server`` / ``_embedded``: `render_trajectory` alone on the same
  trajectories (loaded beforehand, fresh process) under each preset;
- ``library_cpu_ms_per_verdict`` / ``library_throughput_per_s``: the same judging through the library
  (``judge_stream`` on trajectories loaded beforehand, a fresh simulator, a fresh process): the CPU of the
  judging path alone (render, request, parse, verdict line), without interpreter start and loading.
- ``marginal`` (per concurrency, when two or more sizes ran): the steady-state cost of one more verdict of
  the whole command, ``(cpu(n_max) - cpu(n_min)) / (n_max - n_min)``, start-up (interpreter, imports, the
  judge's request template) being a fixed cost; and that fixed cost, ``cpu(n_min) - n_min * marginal``.

Results are merged under ``--label`` into one JSON (default evals/results/client_cpu.json), so the code as
found ("before") and as changed ("after") sit side by side. Not a test: numbers depend on machine load.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evals.simulator import harness
from evals.simulator.server import DEFAULT_MODEL_NAME

SUMMARY = re.compile(r"judged (\d+): passed (\d+), failed \d+, abstained (\d+)")
WALL = re.compile(r"([\d.]+)s, ([\d.]+) verdicts/s")


def _env(code: Path) -> dict:
    env = harness.env()
    env["PYTHONPATH"] = str(code)
    return env


def _run(cmd: list[str], code: Path) -> dict:
    """Run `cmd` with `code` on PYTHONPATH; its exit code, wall time, output and CPU (user + sys)."""
    started = time.perf_counter()
    with harness.ChildCPU() as cpu:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(code), cwd=code)
    return {"returncode": proc.returncode, "wall_s": round(time.perf_counter() - started, 3),
            "stderr": proc.stderr, "stdout": proc.stdout, "cpu_user_s": cpu.user, "cpu_sys_s": cpu.sys,
            "cpu_s": cpu.total}


def ingest_cpu(code: Path, data: Path, n: int) -> dict:
    run = _run([sys.executable, "-m", "rubricforge_dspy", "stats", "--data", str(data), "--json"], code)
    if run["returncode"] != 0:
        raise RuntimeError(f"rubricforge stats failed: {run['stderr'][-2000:]}")
    return {"stats_cpu_s": round(run["cpu_s"], 3), "ingest_cpu_ms_per_item": round(1000 * run["cpu_s"] / n, 3)}


def judge_run(code: Path, sim: harness.SimProcess, data: Path, out: Path, concurrency: int) -> dict:
    cmd = [sys.executable, "-m", "rubricforge_dspy", "judge", "--data", str(data), "--out", str(out),
           "--api-base", sim.api_base, "--model", DEFAULT_MODEL_NAME, "--preset", "server",
           "--concurrency", str(concurrency), "--no-cache"]
    load_before = harness.load_avg()
    run = _run(cmd, code)
    if run["returncode"] != 0:
        raise RuntimeError(f"rubricforge judge failed ({run['returncode']}): {run['stderr'][-2000:]}")
    summary, wall = SUMMARY.search(run["stderr"]), WALL.search(run["stderr"])
    judged = int(summary[1])
    lines = out.read_text().splitlines()
    ids = {json.loads(line)["id"] for line in lines}
    return {
        "concurrency": concurrency, "judged": judged, "passed": int(summary[2]), "abstained": int(summary[3]),
        "output_lines": len(lines), "distinct_ids": len(ids),
        "batch_wall_s": float(wall[1]), "throughput_per_s": float(wall[2]), "process_wall_s": run["wall_s"],
        "client_cpu_s": round(run["cpu_s"], 3), "client_cpu_user_s": round(run["cpu_user_s"], 3),
        "client_cpu_sys_s": round(run["cpu_sys_s"], 3),
        "client_cpu_ms_per_verdict": round(1000 * run["cpu_s"] / judged, 3),
        "load_avg_before": load_before, "load_avg_after": harness.load_avg(),
    }


LIBRARY = """
import json, resource, sys, time
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.core.presets import SERVER
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.module import TrajectoryJudge
data, out, api_base, model, concurrency = sys.argv[1:6]
trajectories = load_trajectories(data)
judge = TrajectoryJudge(render_config=RenderConfig.of(SERVER))
lm = make_lm(LMConfig(model=model, api_base=api_base))
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
before, wall = cpu(), time.perf_counter()
summary = judge_stream(judge, trajectories, out, concurrency=int(concurrency), lm=lm, progress=False)
print(json.dumps({"cpu_s": cpu() - before, "wall_s": time.perf_counter() - wall, "judged": summary.judged,
                  "abstained": summary.n_abstained, "throughput_per_s": summary.throughput}))
"""


def library_run(code: Path, sim: harness.SimProcess, data: Path, out: Path, concurrency: int) -> dict:
    """`judge_stream` on trajectories loaded beforehand, in a fresh process: the CPU of the judging path
    alone (rendering, requests, parsing, writing), without start-up and loading."""
    run = _run([sys.executable, "-c", LIBRARY, str(data), str(out), sim.api_base, DEFAULT_MODEL_NAME,
                str(concurrency)], code)
    if run["returncode"] != 0:
        raise RuntimeError(f"judge_stream failed: {run['stderr'][-2000:]}")
    got = json.loads(run["stdout"].strip().splitlines()[-1])
    return {"library_judged": got["judged"], "library_abstained": got["abstained"],
            "library_throughput_per_s": round(got["throughput_per_s"], 2),
            "library_judge_stream_cpu_s": round(got["cpu_s"], 3),
            "library_cpu_ms_per_verdict": round(1000 * got["cpu_s"] / got["judged"], 3)}


RENDER = """
import json, resource, sys
from rubricforge_dspy.core.presets import EMBEDDED, SERVER
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
trajectories = load_trajectories(sys.argv[1])
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
out = {}
for preset in (SERVER, EMBEDDED):
    config = RenderConfig.of(preset)
    before = cpu()
    for trajectory in trajectories:
        render_trajectory(trajectory, config)
    out[preset.name] = cpu() - before
print(json.dumps({"n": len(trajectories), **out}))
"""


def render_cpu(code: Path, data: Path) -> dict:
    """CPU of `render_trajectory` alone over `data` (loaded beforehand), per trajectory, under the server
    and embedded presets: the part of the judging path that rendering costs."""
    run = _run([sys.executable, "-c", RENDER, str(data)], code)
    if run["returncode"] != 0:
        raise RuntimeError(f"render failed: {run['stderr'][-2000:]}")
    got = json.loads(run["stdout"].strip().splitlines()[-1])
    return {f"render_cpu_ms_per_trajectory_{name}": round(1000 * got[name] / got["n"], 3)
            for name in ("server", "embedded")}


def _commit(code: Path) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=code,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="the key the runs are stored under (before, after)")
    parser.add_argument("--code", default=str(harness.ROOT), help="the checkout whose rubricforge_dspy runs")
    parser.add_argument("--commit", default=None, help="the commit --code holds (default: git rev-parse there)")
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--speedup", type=float, default=40.0)
    parser.add_argument("--out", default=str(harness.ROOT / "evals" / "results" / "client_cpu.json"))
    args = parser.parse_args(argv)
    code = Path(args.code).resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-client-cpu-"))
    started = time.time()
    runs = []
    for n in args.n:
        data = work / f"trajectories-{n}.jsonl"
        dataset = harness.write_repeated(n, data)
        ingest = {**ingest_cpu(code, data, n), **render_cpu(code, data)}
        for concurrency in args.concurrency:
            sim = harness.start_simulator("--speedup", str(args.speedup))
            row = {"n": n, **judge_run(code, sim, data, work / f"verdicts-{n}-c{concurrency}.jsonl", concurrency),
                   **ingest}
            server = sim.stop()
            sim = harness.start_simulator("--speedup", str(args.speedup))
            row.update(library_run(code, sim, data, work / f"library-{n}-c{concurrency}.jsonl", concurrency))
            sim.stop()
            row["server_cpu_s"] = server.get("server_cpu_s")
            row["server_lag"] = server.get("lag")
            row["client_cpu_ms_per_verdict_without_ingest"] = round(
                row["client_cpu_ms_per_verdict"] - row["ingest_cpu_ms_per_item"], 3)
            runs.append(row)
            print(f"[client-cpu {args.label}] n={n} c={concurrency}: {row['throughput_per_s']:.1f} verdicts/s, "
                  f"{row['client_cpu_ms_per_verdict']:.2f} ms CPU per verdict "
                  f"(ingest {row['ingest_cpu_ms_per_item']:.2f} ms per item, render "
                  f"{row['render_cpu_ms_per_trajectory_server']:.2f} ms); library: "
                  f"{row['library_throughput_per_s']:.1f} verdicts/s, {row['library_cpu_ms_per_verdict']:.2f} ms",
                  file=sys.stderr)
    marginal = {}
    for concurrency in args.concurrency:
        rows = sorted((r for r in runs if r["concurrency"] == concurrency), key=lambda r: r["n"])
        if len(rows) >= 2 and rows[-1]["n"] > rows[0]["n"]:
            low, high = rows[0], rows[-1]
            per = (high["client_cpu_s"] - low["client_cpu_s"]) / (high["n"] - low["n"])
            marginal[f"c{concurrency}"] = {
                "from_n": [low["n"], high["n"]], "client_cpu_ms_per_verdict": round(1000 * per, 3),
                "fixed_cpu_s": round(low["client_cpu_s"] - low["n"] * per, 3)}
            print(f"[client-cpu {args.label}] c={concurrency}: marginal {1000 * per:.3f} ms per verdict, fixed "
                  f"{marginal[f'c{concurrency}']['fixed_cpu_s']:.2f} s", file=sys.stderr)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.update({
        "benchmark": "client CPU per verdict (evals/bench_client_cpu.py)", "lm": harness.LM_LABEL,
        "simulated": True, "machine": harness.machine(),
        "command": "rubricforge judge --data D --out V --api-base SIM --model simulated-7b-judge@sim1 "
                   "--preset server --concurrency C --no-cache",
        "dataset_note": dataset["note"].rsplit(" to ", 1)[0] + " to each n",
        "goal": "client CPU per verdict <= 2 ms at concurrency 64 (issue 20, item 2)",
    })
    result.setdefault("labels", {})[args.label] = {
        "code": str(code) if code != harness.ROOT else "this checkout",
        "commit": args.commit or _commit(code), "speedup": args.speedup,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs, "marginal": marginal,
        "wall_time_s": round(time.time() - started, 1),
    }
    harness.write_json(out, result)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
