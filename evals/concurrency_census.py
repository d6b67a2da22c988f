"""Count the package's concurrency implementations and the loops over items that call a judge, at git revisions.

Read from the committed source (``git show REV:path``, parsed with `ast`, never imported), over ``rubricforge_dspy/``:

- ``grep_lines``: the lines matching ``ThreadPoolExecutor|ParallelExecutor|asyncio.gather|Semaphore|as_completed|
  dspy.Parallel`` (issue 42's count, comments and docstrings included), by file;
- ``implementations``: the functions that construct an executor or a gate themselves (a call of
  ``ThreadPoolExecutor``, ``ProcessPoolExecutor``, ``ParallelExecutor``, ``dspy.Parallel``, ``asyncio.Semaphore``,
  ``asyncio.gather``, ``as_completed``), as ``module:qualname``, split by whether they live under ``apply/`` (the
  file-writing job's executors) or not (in-memory batching);
- ``judge_verdict_in_loops``: the functions that call ``judge_verdict``/``ajudge_verdict`` (one item) inside a loop
  or a comprehension: a loop over items calling a judge one at a time (``apply.executors``' ``_drive`` is one that
  starts each call as a task: the file-writing job's own concurrent loop), and ``judge_batch_engine_callers``:
  the functions that call the batch engine (``judge_batch``/``ajudge_batch``), as ``module:qualname``.

    PYTHONPATH=$PWD python -m evals.concurrency_census --rev main --rev HEAD --out evals/results/concurrency_census.json
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

GREP = re.compile(r"ThreadPoolExecutor|ParallelExecutor|asyncio\.gather|Semaphore|as_completed|dspy\.Parallel")
EXECUTORS = {"ThreadPoolExecutor", "ProcessPoolExecutor", "ParallelExecutor", "Parallel", "Semaphore", "gather",
             "as_completed"}
ONE_ITEM = {"judge_verdict", "ajudge_verdict"}
ENGINE = {"judge_batch", "ajudge_batch"}
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def _called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Walker(ast.NodeVisitor):
    def __init__(self, module: str):
        self.module = module
        self.scope: list[str] = []
        self.loops = 0
        self.executors: set[str] = set()
        self.one_item_loops: set[str] = set()
        self.engine: set[str] = set()

    def _where(self) -> str:
        return f"{self.module}:{'.'.join(self.scope) or '<module>'}"

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        loops, self.loops = self.loops, 0  # a loop around a def does not make the def's calls loop calls
        self.generic_visit(node)
        self.loops = loops
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, LOOPS):
            self.loops += 1
            super().generic_visit(node)
            self.loops -= 1
            return
        if isinstance(node, ast.Call):
            name = _called(node)
            dotted = ast.unparse(node.func)
            if name in EXECUTORS and (name != "Parallel" or dotted.endswith("dspy.Parallel")) \
                    and (name not in ("gather", "Semaphore") or dotted.startswith("asyncio.")):
                self.executors.add(self._where())
            if name in ONE_ITEM and self.loops:
                self.one_item_loops.add(self._where())
            if name in ENGINE:
                self.engine.add(self._where())
        super().generic_visit(node)


def census(rev: str) -> dict[str, Any]:
    """The counts at git revision `rev` (see the module docstring)."""
    commit = _git("rev-parse", rev).strip()
    paths = [p for p in _git("ls-tree", "-r", "--name-only", commit, "rubricforge_dspy").split()
             if p.endswith(".py")]
    grep: dict[str, int] = {}
    walkers = []
    for path in paths:
        text = _git("show", f"{commit}:{path}")
        hits = sum(1 for line in text.splitlines() if GREP.search(line))
        if hits:
            grep[path] = hits
        walker = _Walker(path.removesuffix(".py").replace("/", "."))
        walker.visit(ast.parse(text))
        walkers.append(walker)
    executors = sorted(where for w in walkers for where in w.executors)
    in_apply = [where for where in executors if where.startswith("rubricforge_dspy.apply.")]
    return {
        "rev": rev, "commit": commit,
        "grep_lines_total": sum(grep.values()), "grep_lines": dict(sorted(grep.items())),
        "implementations_total": len(executors),
        "implementations_in_memory": [where for where in executors if where not in in_apply],
        "implementations_apply": in_apply,
        "judge_verdict_in_loops": sorted(where for w in walkers for where in w.one_item_loops),
        "judge_batch_engine_callers": sorted(where for w in walkers for where in w.engine),
    }


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--rev", action="append", required=True, help="a git revision (repeatable)")
    cli.add_argument("--out", default=None)
    args = cli.parse_args(argv)
    result = {"what": "concurrency implementations and judge loops in rubricforge_dspy/ (evals/concurrency_census.py)",
              "revisions": [census(rev) for rev in args.rev]}
    text = json.dumps(result, indent=2) + "\n"
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
