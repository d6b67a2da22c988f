"""`rubricforge judge` against a SIMULATED server told to fail (evals/simulator): what the user gets.

    PYTHONPATH=. python -m evals.bench_faults_sim [--n 500]

1. Faults mixed in: garbage 5%, truncated 5%, HTTP 500 10%, stalls 1% (5 s), concurrency 64. Expected:
   500s retried, garbage and truncated answers recorded as abstentions of kind parse / truncated, every id
   once in the output.
2. A server that dies after 200 requests: the command stops with exit 3 after 20 consecutive failures,
   then the same command against a healthy server restarted on the same port resumes and completes the
   file (the endpoint is part of the job's fingerprint: another URL is refused as another job).
Writes evals/results/faults_sim.json. Not a test (tests/test_simulator.py and tests/lm/test_faults_http.py are).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from evals.simulator import harness
from evals.simulator.server import DEFAULT_MODEL_NAME

LINES = re.compile(r"(judged \d+:.*|cached .*LM calls \d+ \(retries \d+\)|error: .*)")


def judge(sim: harness.SimProcess, data: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "rubricforge_dspy.cli.main", "judge", "--data", str(data), "--out", str(out),
           "--api-base", sim.api_base, "--model", DEFAULT_MODEL_NAME, "--preset", "server", "--concurrency", "64",
           "--no-cache"]
    run = harness.run_measured(cmd)
    return {"returncode": run["returncode"], "wall_s": run["wall_s"],
            "summary": [m.group(1)[:400] for m in LINES.finditer(run["stderr"])]}


def file_state(path: Path) -> dict:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ids = Counter(r["id"] for r in records)
    return {"lines": len(records), "distinct_ids": len(ids), "duplicated_ids": sum(1 for n in ids.values() if n > 1),
            "abstained_by_kind": dict(Counter(r.get("error_kind") for r in records if r.get("abstained")))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--out", default=str(harness.ROOT / "evals" / "results" / "faults_sim.json"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    data = work / "trajectories.jsonl"
    dataset = harness.write_repeated(args.n, data)

    sim = harness.start_simulator("--speedup", "10", "--faults", "garbage=0.05,truncated=0.05,http_500=0.10,stall=0.01",
                                  "--stall-seconds", "5")
    mixed = judge(sim, data, work / "mixed.jsonl")
    server = sim.stop()
    mixed.update({"injected": server["faults_injected"], "server_requests": server["counts"]["requests"],
                  "output": file_state(work / "mixed.jsonl")})

    sim = harness.start_simulator("--speedup", "10", "--die-after", "200")
    first = judge(sim, data, work / "resume.jsonl")
    first["output"] = file_state(work / "resume.jsonl")
    sim.stop()
    port = sim.api_base.rsplit(":", 1)[1].split("/")[0]  # the restarted server listens where the dead one did
    sim = harness.start_simulator("--speedup", "10", "--port", port)
    second = judge(sim, data, work / "resume.jsonl")
    second["output"] = file_state(work / "resume.jsonl")
    sim.stop()

    result = {"benchmark": "faults (evals/bench_faults_sim.py)", "lm": harness.LM_LABEL, "simulated": True,
              "machine": harness.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "dataset": dataset,
              "mixed_faults": {"plan": "garbage=0.05,truncated=0.05,http_500=0.10,stall=0.01 (5 s)", **mixed},
              "server_dies_after_200": {"first_run": first, "rerun_against_healthy_server": second}}
    harness.write_json(Path(args.out), result)
    print(json.dumps(result, indent=1)[:3000], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
