"""How many tool results of the shipped data are marked as failed calls, before and after issue 19.

    PYTHONPATH=. python -m evals.tool_error_marks [--out evals/results/tool_error_marks.json] [--sample 12]

Loads every dataset under evals/data/ (one folder per dataset) twice: once with the text rule the
loaders used before issue 19 (kept below as `OLD_RULE`: the output starts with ``Error`` or ``Unknown
action``) patched in, once as shipped. For each dataset it counts tool results marked ``is_error``
(``before`` / ``after``, which include the formats' structural flags: exit codes, error fields, span
status), the text rule alone (``text_old`` / ``text_new``), the new marks per family
(`tool_error_family`), and lists a sample of newly marked results and of results that contain the
word "error" but stay unmarked, so a reader can check precision by eye. No LM is involved.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

from rubricforge_dspy.data.formats import load_trajectories, swe_agent
from rubricforge_dspy.data.formats._tool_errors import tool_error_family

DATA = Path(__file__).resolve().parent / "data"
OUT = Path(__file__).resolve().parent / "results" / "tool_error_marks.json"
OLD_RULE = re.compile(r"""^\s*(?:\#\s*var_\d+\s*=\s*["']?)?(?:Error\b|Unknown action\b)""")
OLD_SWE_SHELL = re.compile(r"Traceback \(most recent call last\)|: command not found\b|^\s*Usage: ", re.MULTILINE)
ERROR_WORD = re.compile(r"error|fail|exception|denied|not found", re.IGNORECASE)
# the format modules that import the text rule by name
PATCHED = ("atif", "dspy_prediction", "inspect_ai", "jsonl", "openhands", "spans", "swe_agent", "tau2",
           "tau_bench")


def old_rule(content: str | None) -> bool:
    """The pre-issue-19 text rule: the output starts with ``Error`` or ``Unknown action``."""
    return bool(OLD_RULE.match(content or ""))


def old_swe_rule(content: str | None) -> bool:
    """SWE-agent's pre-issue-19 rule: the text rule, a traceback, ``command not found`` or a usage line."""
    return old_rule(content) or bool(OLD_SWE_SHELL.search(content or ""))


def _load(folder: Path, old: bool):
    with ExitStack() as stack:
        if old:
            for name in PATCHED:
                module = importlib.import_module(f"rubricforge_dspy.data.formats.{name}")
                if hasattr(module, "looks_like_tool_error"):
                    stack.enter_context(mock.patch.object(module, "looks_like_tool_error", old_rule))
            stack.enter_context(mock.patch.object(swe_agent, "observation_failed", old_swe_rule))
        trajectories = load_trajectories(folder)
    return trajectories


def _snippet(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + " ..."


def measure(folder: Path, sample: int) -> dict:
    """Counts and samples for one dataset folder."""
    after = _load(folder, old=False)
    before = _load(folder, old=True)
    row = {"observations": 0, "before": 0, "after": 0, "text_old": 0, "text_new": 0, "families": Counter(),
           "newly_marked": [], "unmarked_mentioning_error": [], "n_unmarked_mentioning_error": 0,
           "unmarked_before": 0}
    for new_t, old_t in zip(after, before, strict=True):
        for number, (step, old_step) in enumerate(zip(new_t.steps, old_t.steps, strict=True), 1):
            if step.kind != "tool_result":
                continue
            content = step.content or ""
            family = tool_error_family(content)
            row["observations"] += 1
            row["before"] += old_step.is_error
            row["after"] += step.is_error
            row["text_old"] += old_rule(content)
            row["text_new"] += family is not None
            if family:
                row["families"][family] += 1
            where = {"id": new_t.id, "step": number, "tool": step.tool_name, "file": os.path.relpath(
                new_t.source.file, DATA.parent.parent) if new_t.source else None}
            if step.is_error and not old_step.is_error:
                if len(row["newly_marked"]) < sample:
                    row["newly_marked"].append({**where, "family": family, "content": _snippet(content)})
            elif not step.is_error and ERROR_WORD.search(content):
                row["n_unmarked_mentioning_error"] += 1
                if len(row["unmarked_mentioning_error"]) < sample:
                    row["unmarked_mentioning_error"].append({**where, "content": _snippet(content)})
            row["unmarked_before"] += old_step.is_error and not step.is_error
    row["families"] = dict(sorted(row["families"].items()))
    row["trajectories"] = len(after)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--sample", type=int, default=12, help="samples listed per dataset and kind")
    args = parser.parse_args(argv)
    datasets = {}
    for folder in sorted(p for p in DATA.iterdir() if p.is_dir()):
        datasets[folder.name] = measure(folder, args.sample)
    keys = ("trajectories", "observations", "before", "after", "text_old", "text_new", "unmarked_before")
    total = {k: sum(d[k] for d in datasets.values()) for k in keys}
    families = Counter()
    for d in datasets.values():
        families.update(d["families"])
    total["families"] = dict(sorted(families.items()))
    result = {"machine": {"node": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
                          "cpus": os.cpu_count()},
              "rule_before": OLD_RULE.pattern, "total": total, "datasets": datasets}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"{'dataset':<22}{'obs':>7}{'before':>8}{'after':>7}  families")
    for name, d in datasets.items():
        print(f"{name:<22}{d['observations']:>7}{d['before']:>8}{d['after']:>7}  {d['families']}")
    print(f"{'total':<22}{total['observations']:>7}{total['before']:>8}{total['after']:>7}  {total['families']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
