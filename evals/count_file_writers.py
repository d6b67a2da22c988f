"""Count the file-writing drivers of verdict files (issue 42 item 2): where the library makes a `VerdictWriter`
(an AST scan of ``rubricforge_dspy/``), and the lines of the back-end modules, for a checkout of the package.

    python evals/count_file_writers.py [--root DIR] [--label NAME] [--out evals/results/file_writers.json]

Each run adds (or replaces) its label's entry in the JSON file. No LM, no network."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

MODULES = ("apply/runner.py", "apply/stream.py", "apply/ray.py", "apply/openai_batch.py", "cli/judge.py",
           "cli/ray_options.py")


def writers(package: Path) -> list[str]:
    """``path:line`` of each `VerdictWriter(...)` call in `package`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name == "VerdictWriter":
                    found.append(f"{path.relative_to(package)}:{node.lineno}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--label", default="branch")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "file_writers.json")
    args = parser.parse_args()
    package = args.root / "rubricforge_dspy"
    commit = subprocess.run(["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or None
    found = writers(package)
    entry = {"commit": commit, "file_writing_drivers": len(found), "verdict_writers": found,
             "module_lines": {m: len((package / m).read_text(encoding="utf-8").splitlines()) for m in MODULES
                              if (package / m).exists()}}
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[args.label] = entry
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    main()
