"""Markdown cells and tables shared by the report's section writers."""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

__all__ = ["num", "ci", "pval", "cell", "table", "judge_name", "split_table", "figure"]


def num(x: Any, digits: int = 3, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def ci(low: Any, high: Any, digits: int = 3, signed: bool = False) -> str:
    if low is None or high is None:
        return "[n/a]"
    return f"[{num(low, digits, signed)}, {num(high, digits, signed)}]"


def pval(p: Any) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def cell(x: Any) -> str:
    return " ".join(str(x).split()).replace("|", "\\|") if x is not None else "—"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> list[str]:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def judge_name(row: dict[str, Any], kind: str = "induced") -> str:
    """A row's judge, the one the others are compared with in bold and marked with its `kind` (``induced``, or
    ``reference`` for the first of plain verdict files) unless its name says it."""
    if not row.get("induced"):
        return str(row["judge"])
    return f"**{row['judge']}**" + ("" if row["judge"] == kind else f" ({kind})")


def split_table(split: Any) -> list[str]:
    if isinstance(split, dict) and split and all(isinstance(v, dict) for v in split.values()):
        keys: list[str] = []
        for v in split.values():
            keys += [k for k in v if k not in keys]
        return table(["split", *keys], [[name, *(v.get(k) for k in keys)] for name, v in split.items()])
    return [f"Split: `{json.dumps(split, sort_keys=True)}`"]


def figure(links: dict[str, str] | None, name: str, alt: str) -> list[str]:
    if links and name in links:
        return ["", f"![{alt}]({links[name]})"]
    return []
