"""A verdict file used as a stage is read as a stream: the stage keeps one compact verdict per id (its reason
cut as every verdict's is), never the file's lines, so reading a large file costs memory far below its size.
Measured in a subprocess (its own peak RSS, `resource`), against its own baseline after the imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

resource = pytest.importorskip("resource")  # peak RSS: POSIX only

ROOT = Path(__file__).resolve().parents[2]
LINES = 5_000
FILLER = 20_000  # characters of reason and of an extra field per line: ~40 KB a line, ~200 MB in all

READ = """
import resource, sys
from rubricforge_dspy.judge.recorded import RecordedJudge
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stage = RecordedJudge.from_file(sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(stage.verdicts), before, after)
"""


def test_a_large_verdict_file_as_a_stage_takes_memory_far_below_its_size(tmp_path):
    path = tmp_path / "big.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for number in range(LINES):
            passed = number % 2 == 0
            handle.write(json.dumps({"id": f"t{number}", "passed": passed, "score": 0.9 if passed else 0.1,
                                     "reason": "r" * FILLER, "tool_output": "x" * FILLER}) + "\n")
    size_kb = path.stat().st_size // 1024
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", READ, str(path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    count, before, after = map(int, done.stdout.split())
    assert count == LINES
    grown = after - before  # kilobytes on Linux
    assert grown < size_kb / 8, f"reading a {size_kb // 1024} MB verdict file grew the peak RSS by {grown // 1024} MB"
