"""`rubricforge review` at scale: open a 100k-line verdict file (and 100k trajectories), then open items.

A verdict JSONL of N lines and a generic JSONL of the N trajectories it judged are generated
deterministically in a temporary directory (ids ``r-0000000..``, four trials per task, 4-12 steps per
trajectory with tool calls and errors, a short reason, 3% abstentions; the verdict file shuffled against
the data). Then, in this process:

- **open**: `ReviewState` (the verdict file's byte-offset index, the data's byte-offset index, the labels
  journal's lock and replay, the queue's order) and `ReviewServer.start` until uvicorn accepts
  connections: wall and CPU time, and the resident memory added (RSS after minus before);
- **floor**: 50 round trips of ``/healthz`` (a page that does nothing): on a loaded machine, the wall
  time of any request starts there;
- **item**: the item page of ``--items`` random items over real HTTP (httpx, the token cookie set):
  seek and parse the verdict line, read and convert the one trajectory, render it, its symptoms, the
  page; wall time per request (median, p95, max) and the process's CPU time during it;
- **queue**: the first queue page, unfiltered and filtered by task (each filter's first view computes
  the filtered order over all N items);
- the background pass (criteria and symptoms of every item) is timed apart: it is not needed to open
  the page or an item.

The targets (issue 29): open in under 2 s, an item in under 100 ms. Results go to
``evals/results/review.json`` with the machine it ran on.

    PYTHONPATH=$PWD python3 evals/bench_review.py [--n 100000] [--items 200] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_inputs(directory: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    data, verdicts = directory / "data.jsonl", directory / "verdicts.jsonl"
    with data.open("w") as out:
        for i in range(n):
            steps = rng.randint(2, 6)
            messages = [{"role": "user", "content": f"Please change reservation R{i} to flight HAT{i % 997:03d}."}]
            for s in range(steps):
                call = {"id": f"c{s}", "type": "function",
                        "function": {"name": "update_reservation", "arguments": {"id": f"R{i}", "step": s}}}
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                error = rng.random() < 0.2
                messages.append({"role": "tool", "tool_call_id": f"c{s}", "name": "update_reservation",
                                 "content": "Error: seat unavailable" if error else '{"status": "ok", "seat": "12A"}'})
            messages.append({"role": "assistant", "content": "Your reservation has been updated."})
            out.write(json.dumps({"id": f"r-{i:07d}", "task_id": f"t-{i // 4:06d}", "domain": "airline",
                                  "agent": f"agent-{i % 4}", "messages": messages, "reward": float(i % 3 == 0)}))
            out.write("\n")
    order = list(range(n))
    rng.shuffle(order)
    with verdicts.open("w") as out:
        for i in order:
            abstained = rng.random() < 0.03
            score = 0.0 if abstained else round(rng.random(), 6)
            out.write(json.dumps({
                "id": f"r-{i:07d}", "task_id": f"t-{i // 4:06d}", "domain": "airline", "agent": f"agent-{i % 4}",
                "n_steps": 8, "passed": score >= 0.5 and not abstained, "score": score, "abstained": abstained,
                "error": "timeout" if abstained else None, "error_kind": "timeout" if abstained else None,
                "reason": "" if abstained else "The tool results show the update; criterion 2 holds.",
                "contradiction": False, "score_calibrated": None, "label": (i % 3 == 0) * 1 if i % 5 == 0 else None,
                "stage": "escalated" if i % 50 == 0 else "judge"}))
            out.write("\n")
    return data, verdicts


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "load_average_at_start": list(os.getloadavg()),
            "note": "shared 2-core machine (other jobs running): wall times include waiting for the CPU"}


def percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered) * 1000, 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2), "n": len(ordered)}


def run(n: int, items: int, directory: Path) -> dict:
    import httpx

    from rubricforge_dspy.review import ReviewInputs, ReviewServer, ReviewState

    started = time.perf_counter()
    data, verdicts = write_inputs(directory, n)
    generate_s = time.perf_counter() - started
    before = rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    state = ReviewState(ReviewInputs(data=[data], verdicts=verdicts, labels_out=directory / "labels.jsonl",
                                     labeler="bench"))
    state_s = time.perf_counter() - wall
    server = ReviewServer(state)
    server.start()
    open_wall, open_cpu = time.perf_counter() - wall, time.process_time() - cpu
    opened_rss = rss_mb() - before
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60, follow_redirects=True) as client:
            assert client.get(f"/?token={server.token}").status_code == 200
            queue = []
            for path in ("/", "/?task=t-000123", "/?labeled=no"):
                t0 = time.perf_counter()
                assert client.get(path).status_code == 200
                queue.append({"path": path, "ms": round((time.perf_counter() - t0) * 1000, 2)})
            floor = []
            for _ in range(50):  # the round trip of a page that does nothing: what the machine's load costs
                t0 = time.perf_counter()
                client.get("/healthz")
                floor.append(time.perf_counter() - t0)
            rng = random.Random(1)
            times, cpu_times = [], []
            for index in rng.sample(range(n), items):
                t0, c0 = time.perf_counter(), time.process_time()
                page = client.get(f"/item/{index}")
                times.append(time.perf_counter() - t0)
                cpu_times.append(time.process_time() - c0)
                assert page.status_code == 200 and 'id="evidence"' in page.text and "no trajectory" not in page.text
        t0 = time.perf_counter()
        state.enrichment.finished.wait()
        background_s = time.perf_counter() - wall
        return {"lines": n, "input": {"verdict_bytes": verdicts.stat().st_size, "data_bytes": data.stat().st_size,
                                      "generate_s": round(generate_s, 2)},
                "open": {"wall_s": round(open_wall, 3), "cpu_s": round(open_cpu, 3), "state_wall_s": round(state_s, 3),
                         "rss_added_mb": round(opened_rss, 1), "target_s": 2.0, "met_wall": open_wall < 2.0,
                         "met_cpu": open_cpu < 2.0},
                "item_http": {**percentiles(times), "target_ms": 100,
                              "met_wall": sorted(times)[int(0.95 * (len(times) - 1))] < 0.1,
                              "met_cpu": sorted(cpu_times)[int(0.95 * (len(cpu_times) - 1))] < 0.1,
                              "cpu": percentiles(cpu_times),
                              "note": "wall: request sent to page received over 127.0.0.1; cpu: this process's CPU "
                                      "time during the request (server and client threads together)"},
                "healthz_round_trip": percentiles(floor),
                "queue_http": queue,
                "background_criteria_and_symptoms_s": round(background_s, 2),
                "background_error": state.enrichment.error,
                "rss_after_background_mb": round(rss_mb() - before, 1)}
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "evals" / "results" / "review.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-review-") as tmp:
        result = run(args.n, args.items, Path(tmp))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = {"benchmark": "rubricforge review: open a verdict file and its data, then item pages over HTTP",
           "commit": commit, "lm": "none (the review page reads persisted verdicts; inputs are generated)",
           "machine": machine(), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "runs": [result]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0  # targets met or not, the JSON says so (met_wall, met_cpu: p95 for items)


if __name__ == "__main__":
    sys.exit(main())
