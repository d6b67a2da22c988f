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

    PYTHONPATH=$PWD python3 evals/bench_mapping.py --sizes 5000 50000
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            for layout, (data, mapping) in write_inputs(Path(tmp), n).items():
                row = {"records": n, "layout": layout, "file_mb": round(data.stat().st_size / 2**20, 1),
                       **run_child(data, mapping)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"what": "peak RSS of reading N records through a mapping (evals/bench_mapping.py)",
              "mapping": "evals/data/mapped/intercode_bash/mapping.json (records changed per layout)",
              "code": commit, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
