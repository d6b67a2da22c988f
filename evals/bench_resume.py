"""Resume at scale: how long `read_done` (what `rubricforge judge` does before its first LM call on an
existing ``--out``) takes to decide what is left of a finished job of 10k .. 1M verdict lines.

A finished job's output is generated deterministically in a temporary directory (verdict lines as
`rubricforge judge` writes them, `core.verdict.verdict_line`; 2% abstentions of kind ``parse``, which
are answers and stay). Each measurement is a child process (``python -c`` calling
`apply.job.read_done`), so its wall time, CPU (user + sys) and peak RSS are its own (``os.wait4``):

* ``first``: no done index yet (``OUT.ids`` missing: an output from before the index, or the first
  resume): one full pass over the file, which then writes the index;
* ``indexed``: the re-run of the finished job: the index is read and checked, no verdict line is read;
* ``appended``: 1,000 lines appended after the index was written (an interrupted run resumed): the
  index plus only the new lines.

    PYTHONPATH=$PWD python3 evals/bench_resume.py --sizes 10000 100000 1000000
    PYTHONPATH=$PWD python3 evals/bench_resume.py --code /tmp/before --sizes 10000 100000 --label before

Results are merged into ``evals/results/resume_scale.json`` under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "evals"))
from bench_ingest import save_run  # noqa: E402

RESULTS = ROOT / "evals/results/resume_scale.json"
PROBE = """
import sys, time, json
from rubricforge_dspy.apply.job import read_done
start = time.perf_counter()
state = read_done(sys.argv[1])
print(json.dumps({"done": len(state.ids), "seconds_in_read_done": round(time.perf_counter() - start, 3),
                  "from_index": getattr(state, "from_index", 0)}))
"""


def verdict_lines(start: int, n: int) -> bytes:
    """`n` verdict lines as `rubricforge judge` writes them, ids ``item-<start>`` onwards."""
    out = []
    for i in range(start, start + n):
        abstained = i % 50 == 7
        score = 0.0 if abstained else round((i * 7919 % 1000) / 1000, 3)
        out.append(orjson.dumps({
            "id": f"gpt-4o-airline:{i % 50}:{i // 50}~{i}", "task_id": str(i % 50), "domain": "airline",
            "agent": "gpt-4o", "n_steps": 12 + i % 30, "passed": (not abstained) and score >= 0.5, "score": score,
            "reason": "" if abstained else "Criterion 2 (policy) holds: the agent confirmed before booking.",
            "abstained": abstained, "error": "parse: not a JSON verdict" if abstained else None,
            "error_kind": "parse" if abstained else None, "contradiction": False, "score_calibrated": None,
            "cached": False, "attempts": 1, "label": i % 3 == 0, "reward": float(i % 3 == 0),
            "program_sha256": "9" * 64, "judge_fingerprint": "f" * 64, "model": "openai/judge@rev"}) + b"\n")
    return b"".join(out).replace(b'"label":true', b'"label":1').replace(b'"label":false', b'"label":0')


def measured(out: Path, code: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", PROBE, str(out)], env=env, cwd=str(code), stdout=stdout,
                                stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        stdout.seek(0)
        stderr.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"read_done failed: {stderr.read().decode(errors='replace')[-2000:]}")
        result = json.loads(stdout.read())
    return {**result, "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def bench(sizes: list[int], code: Path, appended: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_resume_") as tmp:
        for n in sizes:
            out = Path(tmp) / f"verdicts_{n}.jsonl"
            with out.open("wb") as handle:
                for start in range(0, n, 10_000):
                    handle.write(verdict_lines(start, min(10_000, n - start)))
            row = {"verdict_lines": n, "bytes": out.stat().st_size, "first": measured(out, code)}
            row["indexed"] = measured(out, code)
            if appended:
                with out.open("ab") as handle:
                    handle.write(verdict_lines(n, 1000))
                row["appended_1000"] = measured(out, code)
            for key in ("first", "indexed", "appended_1000"):
                expected = n + (1000 if key == "appended_1000" else 0)
                if key in row and row[key]["done"] != expected:
                    raise SystemExit(f"{key}: read_done found {row[key]['done']} done ids of {expected}")
            print(json.dumps(row), flush=True)
            rows.append(row)
            for extra in Path(tmp).iterdir():
                extra.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--code", type=Path, default=ROOT, help="package copy to run (default: this checkout)")
    parser.add_argument("--label", default="after")
    parser.add_argument("--commit", default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip()
    rows = bench(args.sizes, args.code.resolve(), appended=True)
    save_run(args.out, {"benchmark": "resume at scale (evals/bench_resume.py): read_done on a finished job's output",
                        "lm": "none (no LM call: deciding what is left)", "simulated": False},
             args.label, commit, rows)


if __name__ == "__main__":
    main()
