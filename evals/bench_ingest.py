"""Ingest at scale: `rubricforge stats|convert|render` over a generated generic JSONL of 10k .. 1M trajectories.

The input is made deterministically in a temporary directory: the shipped episodes (tau-bench's
official GPT-4o airline results, 200 episodes, and the ReAct WebShop episodes, 500) converted to the
generic JSONL once, then repeated in a fixed interleaving with distinct ids (``<id>~<k>``) until the
wanted count. Each command runs as a child process (``python -m rubricforge_dspy``); its wall time, CPU
(user + sys) and peak RSS come from ``os.wait4`` (the child's own rusage). Nothing big is committed: the
inputs are deleted when the run ends.

    PYTHONPATH=$PWD python3 evals/bench_ingest.py --sizes 10000 100000 1000000 --label after
    PYTHONPATH=$PWD python3 evals/bench_ingest.py --code /tmp/before --sizes 10000 100000 --label before

``--code DIR`` runs the commands on another copy of the package (e.g. ``git archive`` of an older
commit), so BEFORE and AFTER numbers come from one script. Results are merged into
``evals/results/ingest_scale.json`` under ``--label``.

``--input tau_bench`` makes a whole-document input instead: ONE tau-bench results file (a JSON array)
holding the shipped GPT-4o airline records repeated with distinct task ids (``<task_id>~<k>``), for
`stats` (and `convert`): its RSS shows whether the document is streamed or held whole.

    PYTHONPATH=$PWD python3 evals/bench_ingest.py --input tau_bench --sizes 10000 100000 --commands stats \
        --label after --out evals/results/ingest_documents.json

``--input tau2`` makes ONE tau2-bench results object ``{timestamp, info, simulations, tasks}`` whose
simulations are the shipped GPT-4o airline episodes (their OpenAI-style messages, reward as
``reward_info.reward``) repeated with distinct task ids, with the 50 tasks beside them; ``--input inspect``
makes ONE Inspect AI ``.json`` log: the shipped ``log_read_sample.json`` header with its sample repeated
as 1,000 distinct samples over as many epochs as needed. Runs of these inputs are labeled
``<input>_<label>`` (``tau2_before``, ``tau2_after``).

    PYTHONPATH=$PWD python3 evals/bench_ingest.py --input tau2 --sizes 10000 100000 --commands stats \
        --label after --out evals/results/ingest_documents.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [ROOT / "evals/data/tau_bench_official/gpt-4o-airline.json",
           ROOT / "evals/data/react_webshop/react_webshop_davinci002_500.jsonl"]
RESULTS = ROOT / "evals/results/ingest_scale.json"


def save_run(out: Path, header: dict, label: str, commit: str, rows: list, **extra) -> None:
    """Add one labeled run (its code, machine, date, rows and `extra` fields) to the JSON results file `out`,
    keeping the other labels' runs (``before``/``after``), and set the file's `header` fields."""
    results = json.loads(out.read_text()) if out.exists() else {}
    results.update(header)
    results.setdefault("runs", {})[label] = {
        **extra, "code": commit, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


def machine() -> dict:
    """The machine the numbers come from."""
    return {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(), "system": platform.system(),
            "python": platform.python_version(), "load_avg_at_start": round(os.getloadavg()[0], 2),
            "note": "a shared 2-core VM (other jobs may run); one command = one process = one core"}


def base_records() -> list[bytes]:
    """``(id, line)`` of the shipped episodes as generic JSONL, the line with a placeholder for the id."""
    sys.path.insert(0, str(ROOT))
    from rubricforge_dspy.data.export import record_of
    from rubricforge_dspy.data.formats import load_trajectories

    templates = []
    for path in SHIPPED:
        for trajectory in load_trajectories(path):
            record = record_of(trajectory)
            templates.append((record["id"], orjson.dumps({**record, "id": "\x00ID\x00"})))
    return templates  # in the shipped order: 200 tau-bench, then 500 WebShop


def write_input(path: Path, n: int, templates) -> dict:
    """Write `n` generic JSONL trajectories to `path`; returns its size."""
    placeholder = orjson.dumps("\x00ID\x00")
    with path.open("wb", buffering=1 << 20) as handle:
        for i in range(n):
            ident, line = templates[i % len(templates)]
            handle.write(line.replace(placeholder, orjson.dumps(f"{ident}~{i // len(templates)}"), 1) + b"\n")
    return {"bytes": path.stat().st_size, "mean_bytes_per_trajectory": round(path.stat().st_size / n)}


def tau_records() -> list[dict]:
    """The shipped tau-bench GPT-4o airline results (200 records), as written by tau-bench."""
    return orjson.loads(SHIPPED[0].read_bytes())


def write_tau_document(path: Path, n: int, records: list[dict]) -> dict:
    """Write one tau-bench results array of `n` records to `path`; returns its size."""
    with path.open("wb", buffering=1 << 20) as handle:
        handle.write(b"[")
        for i in range(n):
            record = records[i % len(records)]
            if i:
                handle.write(b",\n")
            handle.write(orjson.dumps({**record, "task_id": f"{record['task_id']}~{i // len(records)}"}))
        handle.write(b"]\n")
    return {"bytes": path.stat().st_size, "mean_bytes_per_trajectory": round(path.stat().st_size / n)}


INSPECT_LOG = ROOT / "evals/data/inspect/log_read_sample.json"


def write_tau2_document(path: Path, n: int, records: list[dict]) -> dict:
    """Write one tau2-bench results object of `n` simulations (the tau-bench `records` as tau2 simulations,
    distinct task ids) and its tasks to `path`; returns its size."""
    info = {"agent_info": {"implementation": "llm_agent", "llm": "gpt-4o"}, "user_info": {"llm": "gpt-4o"},
            "environment_info": {"domain_name": "airline", "policy": "# Airline Agent Policy"}}
    tasks = [{"id": str(task), "user_scenario": {"instructions": f"task {task}"}, "evaluation_criteria": {}}
             for task in sorted({r["task_id"] for r in records})]
    with path.open("wb", buffering=1 << 20) as handle:
        handle.write(b'{"timestamp": "2026-01-01T00:00:00", "info": ' + orjson.dumps(info) + b', "simulations": [')
        for i in range(n):
            record = records[i % len(records)]
            if i:
                handle.write(b",\n")
            handle.write(orjson.dumps({"id": f"sim-{i}", "task_id": f"{record['task_id']}~{i // len(records)}",
                                       "trial": record.get("trial", 0), "messages": record["traj"],
                                       "reward_info": {"reward": record["reward"]}, "termination_reason": "user_stop"}))
        handle.write(b'], "tasks": ' + orjson.dumps(tasks) + b"}\n")
    return {"bytes": path.stat().st_size, "mean_bytes_per_trajectory": round(path.stat().st_size / n)}


def write_inspect_document(path: Path, n: int) -> dict:
    """Write one Inspect AI `.json` log of `n` samples (the shipped log's sample, distinct ids) to `path`."""
    log = orjson.loads(INSPECT_LOG.read_bytes())
    samples = log.pop("samples")
    with path.open("wb", buffering=1 << 20) as handle:
        handle.write(orjson.dumps(log)[:-1] + b', "samples": [')
        for i in range(n):
            sample = samples[i % len(samples)]
            if i:
                handle.write(b",\n")
            # 1,000 distinct samples, each run for as many epochs as it takes: distinct (sample, epoch) ids
            handle.write(orjson.dumps({**sample, "id": f"{sample['id']}~{i % 1000}", "epoch": i // 1000 + 1}))
        handle.write(b"]}\n")
    return {"bytes": path.stat().st_size, "mean_bytes_per_trajectory": round(path.stat().st_size / n)}


def measured(argv: list[str], code: Path) -> dict:
    """Run the command and read its own rusage with os.wait4 (per child, not cumulative)."""
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    load_before = round(os.getloadavg()[0], 2)  # the machine is shared: say how busy it was
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rubricforge_dspy", *argv], env=env, cwd=str(code),
                                stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {stderr.decode(errors='replace')[-2000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "load_avg_before": load_before,
            "load_avg_after": round(os.getloadavg()[0], 2), "stdout": stdout}


def bench(sizes: list[int], code: Path, commands: list[str], kind: str = "generic") -> list[dict]:
    templates = base_records() if kind == "generic" else tau_records() if kind in ("tau_bench", "tau2") else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        for n in sizes:
            if kind == "generic":
                data = Path(tmp) / f"generic_{n}.jsonl"
                info = write_input(data, n, templates)
            elif kind == "tau_bench":  # the file name says airline, as the shipped file's does
                data = Path(tmp) / f"gpt-4o-airline-{n}.json"
                info = write_tau_document(data, n, templates)
            elif kind == "tau2":
                data = Path(tmp) / f"tau2_airline_{n}.json"
                info = write_tau2_document(data, n, templates)
            else:
                data = Path(tmp) / f"inspect_log_{n}.json"
                info = write_inspect_document(data, n)
            row = {"trajectories": n, **info}
            for command in commands:
                if command == "stats":
                    result = measured(["stats", "--json", "--data", str(data)], code)
                    counted = json.loads(result.pop("stdout"))["trajectories"]
                    if counted != n:
                        raise SystemExit(f"stats counted {counted} trajectories of {n}")
                elif command == "convert":
                    out = Path(tmp) / f"converted_{n}.jsonl"
                    result = measured(["convert", "--data", str(data), "--out", str(out)], code)
                    result.pop("stdout")
                    out.unlink()
                elif command == "render_last":
                    result = measured(["render", "--data", str(data), "--index", str(n - 1)], code)
                    result.pop("stdout")
                else:
                    raise SystemExit(f"unknown command {command}")
                result["trajectories_per_cpu_s"] = round(n / result["cpu_s"]) if result["cpu_s"] else None
                row[command] = result
                print(json.dumps({"n": n, command: result}), flush=True)
            data.unlink()
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--commands", nargs="+", default=["stats", "convert", "render_last"])
    parser.add_argument("--code", type=Path, default=ROOT, help="package copy to run (default: this checkout)")
    parser.add_argument("--label", default="after", help="key of this run in the JSON (before/after)")
    parser.add_argument("--commit", default=None, help="the commit --code was made from")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--input", choices=["generic", "tau_bench", "tau2", "inspect"], default="generic",
                        help="generic JSONL (one record per line), or one tau-bench results array, tau2-bench "
                             "results object or Inspect AI .json log")
    args = parser.parse_args()
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip()
    rows = bench(args.sizes, args.code.resolve(), args.commands, args.input)
    described = {"generic": "generic JSONL: tau-bench GPT-4o airline (200) + ReAct WebShop (500) shipped episodes, "
                            "converted once and repeated with distinct ids",
                 "tau_bench": "one tau-bench results file (a JSON array): the shipped GPT-4o airline records (200) "
                              "repeated with distinct task ids",
                 "tau2": "one tau2-bench results object {timestamp, info, simulations, tasks}: the shipped GPT-4o "
                         "airline episodes (200) as simulations, repeated with distinct task ids, 50 tasks after them",
                 "inspect": "one Inspect AI .json log: the shipped log_read_sample.json header, its sample repeated "
                            "as 1,000 distinct samples x as many epochs as needed"}
    header = {"benchmark": "ingest at scale (evals/bench_ingest.py)", "lm": "none (no LM call: ingest only)",
              "simulated": False}
    if args.input == "generic":
        save_run(args.out, {**header, "input": described["generic"]}, args.label, commit, rows)
    else:  # one results file holds the runs of every document input, each naming its input
        label = args.label if args.input == "tau_bench" else f"{args.input}_{args.label}"
        save_run(args.out, header, label, commit, rows, input=described[args.input])


if __name__ == "__main__":
    main()
