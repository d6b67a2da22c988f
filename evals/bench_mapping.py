"""Mapped logs in flat memory: peak RSS of reading N records through a mapping, by file layout.

The input is made deterministically in a temporary directory from the shipped InterCode sample
(evals/data/mapped/intercode_bash/, 4 records), repeated with distinct task ids until N records, in four
layouts read by the same mapping (evals/data/mapped/intercode_bash/mapping.json, its ``records`` changed):

* ``jsonl``: one record per line (``records: {"from": "jsonl"}``);
* ``array``: one JSON array (``records: "@"``, streamed element by element);
* ``dict``: one JSON object of records keyed by id, InterCode's own layout (``records: "*"``, streamed member
  by member);
* ``array_whole``: the same array read through a filter (``records: "[?task_id >= `0`]"``), which
  JMESPath evaluates on the whole document: the baseline that holds the file.

Each read runs as a child process (``python -c ...`` calling `iter_mapped`); its wall time, CPU and peak RSS
come from ``os.wait4``. Nothing big is committed: the inputs are deleted when the run ends.

``--cpu N`` (issue 35) measures the CPU of a mapped read against the built-in generic JSONL reader on the same
data, in this process (the best of 3 reads, ``time.process_time``), for the InterCode and MINT samples repeated
to N records as JSON Lines:

* ``source``: the log read through its shipped mapping, against the same trajectories written as generic JSONL
  (`rubricforge convert`) read by the generic reader (the source's bytes differ: MINT's lines are larger);
* ``same_bytes``: that generic JSONL file read through a mapping of the generic layout (`GENERIC_MAPPING`),
  against the generic reader: the same bytes parsed, the mapping's own cost.

    PYTHONPATH=$PWD python3 evals/bench_mapping.py --sizes 5000 50000 --cpu 3000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "evals/data/mapped/intercode_bash"
RESULTS = ROOT / "evals/results/mapping.json"
LAYOUTS = {"jsonl": {"from": "jsonl"}, "array": "@", "dict": "*", "array_whole": "[?task_id >= `0`]"}
CHILD = ("import sys; from rubricforge_dspy.data.formats.mapping import iter_mapped; "
         "print(sum(1 for _ in iter_mapped(sys.argv[1], sys.argv[2])))")


def machine() -> dict:
    """The machine the numbers come from (as the other benchmarks name it)."""
    sys.path.insert(0, str(ROOT))
    from evals.bench_ingest import machine as ingest_machine

    return ingest_machine()


def write_inputs(directory: Path, n: int) -> dict[str, tuple[Path, Path]]:
    """``layout -> (data file, mapping file)`` holding `n` records made from the shipped sample."""
    base = list(json.loads(next(SAMPLE.glob("*.sample.json")).read_text()).values())
    mapping = json.loads((SAMPLE / "mapping.json").read_text())

    def records():
        for i in range(n):
            record = dict(base[i % len(base)])
            record["task_id"] = i
            yield record

    files = {}
    for layout, records_spec in LAYOUTS.items():
        data = directory / f"{layout}.{'jsonl' if layout == 'jsonl' else 'json'}"
        with open(data, "w", encoding="utf-8") as out:
            # written record by record: the parent stays small, so the child it forks starts small (a fork
            # inherits the parent's resident pages, which `os.wait4` would report as the child's peak)
            if layout == "jsonl":
                out.writelines(json.dumps(r) + "\n" for r in records())
            else:
                dict_layout = layout == "dict"
                out.write("{" if dict_layout else "[")
                for i, r in enumerate(records()):
                    out.write(("," if i else "") + (f'"{r["task_id"]}": ' if dict_layout else "") + json.dumps(r))
                out.write("}" if dict_layout else "]")
        mapping_file = directory / f"{layout}.mapping.json"
        mapping_file.write_text(json.dumps({**mapping, "records": records_spec}))
        files[layout] = (data, mapping_file)
    return files


def run_child(data: Path, mapping: Path) -> dict:
    """Wall time, CPU and peak RSS of one read, in a child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(data), str(mapping)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    loaded = int(process.stdout.read().decode().strip() or -1)
    process.stdout.close()
    if status != 0:
        raise RuntimeError(f"the read of {data} failed (status {status})")
    return {"loaded": loaded, "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


GENERIC_MAPPING = {"name": "generic_mapped", "records": {"from": "jsonl"}, "id": "id", "task_id": "task_id",
                   "domain": "domain", "agent": "agent",
                   "messages": {"path": "messages", "content": "content || action", "error": "is_error"},
                   "reward": "reward", "label": "reward > 0"}
CPU_SAMPLES = {"intercode_bash": ("intercode_bash/mapping.json", "*"), "mint": ("mint_gsm8k/mapping.yaml", None)}


def _best_cpu(read, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        read()
        best = min(best, time.process_time() - start)
    return best


def cpu_rows(n: int, directory: Path) -> list[dict]:
    """Mapped against generic CPU per sample (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    from rubricforge_dspy.data.formats import iter_trajectories
    from rubricforge_dspy.data.formats.mapping import iter_mapped

    mapped_dir = ROOT / "evals/data/mapped"
    generic_mapping = directory / "generic.mapping.json"
    generic_mapping.write_text(json.dumps(GENERIC_MAPPING))
    rows = []
    for name, (mapping_path, records) in CPU_SAMPLES.items():
        mapping_file = mapped_dir / mapping_path
        sample = next(p for p in mapping_file.parent.iterdir() if ".sample." in p.name)
        if records == "*":  # a dict of records: its values, as JSON Lines
            base = list(json.loads(sample.read_text()).values())
            mapping = json.loads(mapping_file.read_text())
            mapping_file = directory / f"{name}.mapping.json"
            mapping_file.write_text(json.dumps({**mapping, "records": {"from": "jsonl"}}))
        else:
            base = [json.loads(line) for line in sample.read_text().splitlines() if line.strip()]
        data = directory / f"{name}.jsonl"
        with open(data, "w", encoding="utf-8") as out:
            for i in range(n):
                record = json.loads(json.dumps(base[i % len(base)]))
                if name == "mint":
                    record["task"]["task_id"] = i
                else:
                    record["task_id"] = i
                out.write(json.dumps(record) + "\n")
        generic = directory / f"{name}.generic.jsonl"
        subprocess.run([sys.executable, "-m", "rubricforge_dspy.cli.main", "convert", "--map", str(mapping_file),
                        "--data", str(data), "--out", str(generic)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        generic_cpu = _best_cpu(lambda g=generic: sum(1 for _ in iter_trajectories(g, format="jsonl")))
        for kind, (path, through) in (("source", (data, mapping_file)), ("same_bytes", (generic, generic_mapping))):
            cpu = _best_cpu(lambda p=path, m=through: sum(1 for _ in iter_mapped(p, m)))
            rows.append({"sample": name, "records": n, "compared": kind, "mapped_cpu_s": round(cpu, 3),
                         "generic_cpu_s": round(generic_cpu, 3), "ratio": round(cpu / generic_cpu, 2),
                         "mapped_mb": round((data if kind == "source" else generic).stat().st_size / 2**20, 1),
                         "generic_mb": round(generic.stat().st_size / 2**20, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[5000, 50000],
                        help="records per memory run; none (--sizes with no number) keeps the rows in --out")
    parser.add_argument("--cpu", type=int, default=0, metavar="N",
                        help="also measure mapped against generic CPU on N records (0: not)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cpu = []
    if args.cpu:
        logging.disable(logging.WARNING)  # the generic mapping's empty-field warnings are not the point here
        with tempfile.TemporaryDirectory() as tmp:
            cpu = cpu_rows(args.cpu, Path(tmp))
    rows = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            for layout, (data, mapping) in write_inputs(Path(tmp), n).items():
                row = {"records": n, "layout": layout, "file_mb": round(data.stat().st_size / 2**20, 1),
                       **run_child(data, mapping)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    rows_from = {}
    if not args.sizes and previous.get("rows"):  # the memory rows kept as they were measured, and said so
        rows = previous["rows"]
        rows_from = {"rows_code": previous.get("rows_code", previous.get("code")),
                     "rows_date": previous.get("rows_date", previous.get("date"))}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"what": "peak RSS of reading N records through a mapping (evals/bench_mapping.py)",
              "mapping": "evals/data/mapped/intercode_bash/mapping.json (records changed per layout)",
              "code": commit, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "rows": rows, **rows_from,
              "cpu_vs_generic": {"what": "CPU of a mapped read / CPU of the built-in generic JSONL reader on the same "
                                         "trajectories (best of 3; --cpu N)", "rows": cpu}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
