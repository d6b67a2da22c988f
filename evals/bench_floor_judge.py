"""`floor --judge` twice on the same items: the LM requests each run makes, the opens of the data file, the
wall time, and the report and saved hybrid (to compare code versions on the same inputs).

The data are the first ``--n`` episodes of the shipped WebShop set (labels at reward > 0); the judge is the seed
program; the LM is the fake OpenAI-compatible server on 127.0.0.1 (`rubricforge_dspy.testing.fake_server`,
**simulated**: a deterministic answer per item, from a hash of its text). Each run is a child process
(``python -m``-like, with the code under ``--code`` first on its path) whose opens of the data file are counted
by an audit hook. The same fake server serves every run of one label (its endpoint is part of a judging job).

    PYTHONPATH=$PWD python3 evals/bench_floor_judge.py --label after
    PYTHONPATH=$PWD python3 evals/bench_floor_judge.py --code /tmp/main-tree --label before

Results are merged into ``evals/results/floor_judge_job.json`` under ``--label``; with both ``before`` and
``after`` there, ``same_report`` says whether their reports (without the new ``judge_verdicts_out`` key) and
saved hybrid stacks are equal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEBSHOP = ROOT / "evals" / "data" / "react_webshop" / "react_webshop_davinci002_500.jsonl"
RESULTS = ROOT / "evals" / "results" / "floor_judge_job.json"
CHILD = """
import sys
import rubricforge_dspy
print(f"CODE {rubricforge_dspy.__file__}", file=sys.stderr)
data, opened = sys.argv[1], [0]
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0] == data:
        opened[0] += 1
sys.addaudithook(hook)
from rubricforge_dspy.cli.main import main
code = main(sys.argv[2:])
print(f"OPENS {opened[0]}", file=sys.stderr)
sys.exit(code)
"""


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpus": os.cpu_count(), "cpu": cpu, "system": platform.system(), "python": platform.python_version(),
            "note": "a shared 2-core VM (other jobs may run)"}


def answer(text: str) -> dict:
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    score = (h % 97) / 96
    return {"reason": "Judged by its text.", "passed": score >= 0.5, "score": round(score, 3)}


def run(code: Path, data: Path, argv: list[str]) -> tuple[int, int, float, str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(data), *argv], env=env, capture_output=True, text=True,
                          timeout=1800, cwd=data.parent)  # (not this tree: `-c` puts the working directory first)
    wall = time.perf_counter() - started
    opens = next((int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("OPENS ")), -1)
    loaded = next((line.split(" ", 1)[1] for line in done.stderr.splitlines() if line.startswith("CODE ")), "")
    if not Path(loaded).resolve().is_relative_to(code.resolve()):
        raise SystemExit(f"the child ran {loaded}, not the code under {code}")
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    return done.returncode, opens, wall, done.stdout


def measure(code: Path, n: int) -> dict:
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.program.store import freeze
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "small.jsonl"
        data.write_text("\n".join(WEBSHOP.read_text().splitlines()[:n]) + "\n")
        program = root / "judge.json"
        freeze(TrajectoryJudge(), program, lm="fake-judge")
        hybrid = root / "hybrid.json"
        runs, reports = [], []
        with FakeOpenAI(lambda body, k: answer(user_text(body))) as fake:
            argv = ["floor", "--data", str(data), "--label-threshold", "0", "--format", "webshop_react", "--judge",
                    str(program), "--save-floor", str(hybrid), "--json", "--api-base", fake.url + "/v1",
                    "--model", "fake-judge"]
            for _ in range(2):
                before = fake.n_requests
                code_, opens, wall, out = run(code, data, argv)
                runs.append({"exit": code_, "lm_requests": fake.n_requests - before, "data_file_opens": opens,
                             "wall_s": round(wall, 2)})
                report = json.loads(out) if code_ == 0 else {}
                report.pop("judge_verdicts_out", None)
                for key in ("data",):  # the temporary path
                    report.pop(key, None)
                reports.append(report)
        stack = json.loads(hybrid.read_text())["rubricforge"]["hybrid"] if hybrid.exists() else None

    def digest(value: object) -> str:  # the temporary folder's name (in the judge's source) left out
        return hashlib.sha256(json.dumps(value, sort_keys=True).replace(str(root), "ROOT").encode()).hexdigest()

    return {"items": n, "runs": runs, "same_report_both_runs": reports[0] == reports[1],
            "report_sha256": digest(reports[0]), "hybrid_stack_sha256": digest(stack)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the source tree to measure (default: this one)")
    parser.add_argument("--label", default="after")
    parser.add_argument("--n", type=int, default=100, help="episodes (all labeled at reward > 0)")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.update({"benchmark": "evals/bench_floor_judge.py", "machine": machine(),
                    "lm": "the fake OpenAI-compatible server (simulated: a deterministic answer per item)"})
    results.setdefault("runs", {})[args.label] = {"code": str(args.code), **measure(args.code, args.n),
                                                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    labels = results["runs"]
    if "before" in labels and "after" in labels:
        results["same_report"] = (labels["before"]["report_sha256"] == labels["after"]["report_sha256"]
                                  and labels["before"]["hybrid_stack_sha256"] == labels["after"]["hybrid_stack_sha256"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
