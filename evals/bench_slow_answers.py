"""Slow answers and the cascade: `judge --cascade` (floor -> judge) against plain `judge` on the same items.

    PYTHONPATH=. python -m evals.bench_slow_answers [--n 20000] [--concurrency 64]

The LM is the fake OpenAI-compatible server (`rubricforge_dspy.testing.fake_server`, simulated: every answer is
the same verdict), started in this process; each command runs as ``python -m rubricforge_dspy judge ...`` in a
subprocess against it, with no verdict cache (``--no-cache``). Which requests are faulty is drawn per request
(``random.Random(seed + request number)``): in configuration ``slow`` 2% of the answers come 3 s late; in
``slow_and_500`` also 5% of the requests get an HTTP 500 (retried by the job's retry policy). Both commands see the
same fault rates per request.

The items: the shipped webshop set (500 trajectories, `evals/data/react_webshop`) repeated with fresh ids and a
numbered instruction (every item's text differs) up to `--n`. The cascade: a symptom floor fit on the set
(`SymptomFloor.fit`, label reward > 0) with hand-set thresholds at its score quantiles so that it decides about 70%
of the items, then the seed LLM judge (`TrajectoryJudge`) deciding at 0.8 / 0.2 (a hand-set cascade: this measures
speed, not a guarantee). Measured per run: wall time of the command, LM requests the server answered (200 or
500), lines written, and that every id is in the output exactly once. Acceptance (issue 42): the cascade's wall
time is at most the plain run's when it makes fewer calls.

Writes evals/results/slow_answers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rubricforge_dspy.testing.fake_server import DEFAULT_VERDICT, FakeOpenAI, Reply

REPO = Path(__file__).resolve().parents[1]
WEBSHOP = REPO / "evals" / "data" / "react_webshop" / "react_webshop_davinci002_500.jsonl"
OUT = REPO / "evals" / "results" / "slow_answers.json"
CONFIGS = {"slow": {"slow": 0.02, "http_500": 0.0}, "slow_and_500": {"slow": 0.02, "http_500": 0.05}}
SLOW_SECONDS = 3.0


def make_data(path: Path, n: int) -> None:
    """`n` webshop trajectories, each with its own session id and a numbered instruction (no two texts alike)."""
    records = [json.loads(line) for line in WEBSHOP.read_text().splitlines() if line.strip()]
    with path.open("w") as handle:
        for k in range(n):
            record = dict(records[k % len(records)])
            record["session"] = f"{record['session']}_{k}"
            record["instruction"] = f"[item {k}] {record['instruction']}"
            handle.write(json.dumps(record) + "\n")


def make_cascade(data: Path, root: Path, decided: float = 0.7) -> tuple[Path, float]:
    """A floor -> judge cascade whose floor decides about `decided` of the items in `data`; (its path, the share
    the floor decides on the shipped set)."""
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.judge.cascade import Cascade, StageRule
    from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
    from rubricforge_dspy.judge.module import TrajectoryJudge

    shipped = list(load_trajectories(WEBSHOP, label_threshold=0.0))
    floor = FloorJudge(SymptomFloor.fit(shipped))
    scores = sorted(v.score_calibrated if v.score_calibrated is not None else v.score for v in floor.batch(shipped))
    levels = sorted(set(scores))  # (the floor's scores are few distinct values: the pair nearest `decided`)
    pairs = [(lo, hi) for i, lo in enumerate(levels) for hi in levels[i + 1:]]
    if not pairs:
        raise SystemExit("the floor gives one score to every item")

    def share_of(pair: tuple[float, float]) -> float:
        return sum(s <= pair[0] or s >= pair[1] for s in scores) / len(scores)

    t_fail, t_pass = min(pairs, key=lambda pair: abs(share_of(pair) - decided))
    share = sum(s >= t_pass or s <= t_fail for s in scores) / len(scores)
    path = root / "cascade.json"
    Cascade([floor, TrajectoryJudge()], [StageRule("floor", t_pass, t_fail), StageRule("judge", 0.8, 0.2)]).save(path)
    return path, share


def responder(slow: float, http_500: float, seed: int):
    def answer(body: dict, n: int) -> Reply:
        draw = random.Random(seed * 1_000_003 + n).random()
        if draw < http_500:
            return Reply(status=500)
        if draw < http_500 + slow:
            return Reply(content=DEFAULT_VERDICT, delay=SLOW_SECONDS)
        return Reply(content=DEFAULT_VERDICT)
    return answer


def run(kind: str, data: Path, cascade: Path, root: Path, config: dict, concurrency: int, n: int,
        package_root: Path = REPO) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"{kind}.jsonl"
    with FakeOpenAI(responder(config["slow"], config["http_500"], seed=42)) as fake:
        argv = [sys.executable, "-m", "rubricforge_dspy", "judge", "--data", str(data), "--out", str(out),
                "--label-threshold", "0", "--concurrency", str(concurrency), "--no-cache",
                "--api-base", fake.url + "/v1", "--model", "fake-judge", "--timeout", "30"]
        if kind == "cascade":
            argv += ["--cascade", str(cascade)]
        env = {**os.environ, "PYTHONPATH": str(package_root), "PYTHONWARNINGS": "ignore"}
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        requests = fake.n_requests
        statuses = [r["status"] for r in fake.requests]
    if done.returncode != 0:
        raise SystemExit(f"{kind} exited {done.returncode}: {done.stderr[-2000:]}")
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    stages: dict[str, int] = {}
    if kind == "cascade":
        for line in out.read_text().splitlines():
            stage = json.loads(line)["stage"]
            stages[stage] = stages.get(stage, 0) + 1
    return {"wall_seconds": round(wall, 2), "lm_requests": requests,
            "load_average_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "http_500_answered": sum(s == 500 for s in statuses), "lines": len(ids),
            "every_id_once": len(ids) == len(set(ids)) == n, "lines_by_stage": stages or None}


def _revision(root: Path) -> str:
    """The commit the commands ran (and whether its work tree had changes)."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "rubricforge_dspy"], capture_output=True,
                           text=True)
    return head.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--package-root", type=Path, default=REPO,
                        help="the checkout whose rubricforge_dspy the commands run (e.g. main's, for a before number)")
    args = parser.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "items.jsonl"
        make_data(data, args.n)
        cascade, share = make_cascade(data, root)
        for name in args.configs:
            config = CONFIGS[name]
            rows = {}
            for kind in ("plain", "cascade"):
                rows[kind] = run(kind, data, cascade, root / name, config, args.concurrency, args.n,
                                 args.package_root.resolve())
                print(name, kind, rows[kind], flush=True)
            fewer = rows["cascade"]["lm_requests"] < rows["plain"]["lm_requests"]
            not_slower = rows["cascade"]["wall_seconds"] <= rows["plain"]["wall_seconds"]
            rows["acceptance"] = {"cascade_makes_fewer_calls": fewer, "cascade_not_slower": not_slower}
            results[name] = {"faults": {**config, "slow_seconds": SLOW_SECONDS}, **rows}
    record = {"benchmark": "evals/bench_slow_answers.py", "lm": "fake OpenAI-compatible server (simulated)",
              "machine": f"{os.cpu_count()}-core VM, {platform.platform()}, Python {platform.python_version()}",
              "package": _revision(args.package_root.resolve()), "n_items": args.n, "concurrency": args.concurrency,
              "floor_decides_on_the_shipped_set": round(share, 3),
              "configs": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
