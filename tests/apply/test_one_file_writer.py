"""One file-writing driver (issue 42 item 2): the verdict file is written by the job runner alone. Every back end
(local, Ray, the Batch API; a plain program or a cascade) hands its verdicts to `apply.runner.JobRun`, whose
`VerdictWriter` is the only one the library makes (main had three: the runner's, `apply.ray._drain`'s and
`apply.openai_batch._BatchRun`'s)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rubricforge_dspy"


def _writers() -> list[str]:
    """Where the library makes a `VerdictWriter` (``path:line``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name == "VerdictWriter":
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_the_job_runner_is_the_one_writer_of_verdict_files():
    writers = _writers()
    assert len(writers) == 1 and writers[0].startswith("apply/runner.py:"), writers
