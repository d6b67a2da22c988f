"""The optional parts of a run directory: the induced rubric, criterion ablations
(``ablation/<number>_<slug>.jsonl``, ``ablation/criteria.json``) and ``attribution.jsonl``
(layout: docs/REPORT.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from rubricforge_dspy.core.criteria import parse_criteria
from rubricforge_dspy.report.records import Ablation, Items, Predictions, RunError, id_list, read_json

__all__ = ["rubric_from", "load_ablations", "load_attribution"]


def rubric_from(meta: dict[str, Any], run_dir: Path, notes: list[str]) -> str | None:
    rubric = meta.get("rubric")
    if isinstance(rubric, str) and rubric.strip():
        return rubric
    program = meta.get("program")
    if isinstance(program, str) and program:
        path = Path(program)
        candidates = [path] if path.is_absolute() else [run_dir / path, path]
        for p in candidates:
            if p.is_file():
                try:
                    data = json.loads(p.read_text(encoding="utf-8"))
                    text = data.get("rubricforge", {}).get("rubric")
                except (OSError, ValueError, AttributeError):
                    text = None
                if isinstance(text, str) and text.strip():
                    return text
        notes.append(f"run.json: no 'rubric' and no readable rubric in program {program!r}; "
                     "criteria are named from ablation file names only")
    return None


_ABLATION_FILE = re.compile(r"^(\d+)_(.+)\.jsonl$")


def load_ablations(run_dir: Path, items: Items, rubric: str | None, notes: list[str],
                   read: Callable[[str, Path], Predictions]) -> tuple[Ablation, ...]:
    """The induced judge re-run without each criterion, read and aligned like the judges
    (``read(judge, path)``)."""
    criteria = parse_criteria(rubric) if rubric else []
    adir = run_dir / "ablation"
    if not adir.is_dir():
        return ()
    names: dict[int, str] = {c.number: c.name for c in criteria}
    listed: set[int] = set()
    cpath = adir / "criteria.json"
    if cpath.exists():
        data = read_json(cpath)
        if not isinstance(data, list):
            raise RunError(f"{cpath}: expected a list of {{number, name}} objects")
        for entry in data:
            number = entry.get("number") if isinstance(entry, dict) else None
            if not (isinstance(number, int) and not isinstance(number, bool) and isinstance(entry.get("name"), str)):
                raise RunError(f"{cpath}: bad entry {entry!r}; expected {{\"number\": int, \"name\": str}}")
            names[entry["number"]] = entry["name"]
            listed.add(entry["number"])
    out = []
    seen: dict[int, Path] = {}
    for path in sorted(adir.glob("*.jsonl")):
        m = _ABLATION_FILE.match(path.name)
        if not m:
            raise RunError(f"{path}: ablation files must be named <criterion-number>_<slug>.jsonl")
        number = int(m[1])
        if number in seen:
            raise RunError(f"{path}: second ablation file for criterion {number} (also {seen[number].name})")
        seen[number] = path
        name = names.get(number) or m[2].replace("-", " ").replace("_", " ")
        preds = read(f"-{number}", path)
        out.append(Ablation(number=number, name=name, predictions=preds))
    for number in sorted(listed - set(seen)):
        notes.append(f"ablation/criteria.json lists criterion {number} ({names[number]}) but no "
                     f"ablation/{number}_*.jsonl exists; not ablated")
    return tuple(sorted(out, key=lambda a: a.number))


def load_attribution(run_dir: Path, items: Items, notes: list[str]) -> dict[str, Any] | None:
    path = run_dir / "attribution.jsonl"
    if not path.exists():
        return None
    out: dict[str, Any] = {}
    for lineno, r in _attribution_lines(path):
        if not isinstance(r.get("id"), str) or "criterion" not in r:
            raise RunError(f"{path}:{lineno}: expected {{\"id\": str, \"criterion\": number|name|null}}")
        crit = r["criterion"]
        if isinstance(crit, bool) or not (crit is None or isinstance(crit, (str, int))):
            raise RunError(f"{path}:{lineno}: criterion must be a number, a name or null, got {crit!r}")
        if r["id"] in out:
            raise RunError(f"{path}:{lineno}: duplicate id {r['id']!r}")
        out[r["id"]] = crit
    unknown = sorted(set(out) - set(items.ids))
    if unknown:
        notes.append(f"attribution.jsonl: {len(unknown)} id(s) not in the test predictions ignored: "
                     f"{id_list(unknown, 5)}")
    return out


def _attribution_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunError(f"{path}:{lineno}: not valid JSON ({error.msg})") from None
        if not isinstance(r, dict):
            raise RunError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, r
