"""What a rendered report must say before its tables (issue 41 item 7), checked on its markdown: the embedded model's
caveat before the first table, and every judge row defined in a line before the first table that lists it."""

from __future__ import annotations

import re

from rubricforge_dspy.report.judges import EMBEDDED_CAVEAT_TITLE, UNDEFINED

DEFINITION = re.compile(r"^- `(?P<name>[^`]+)`: (?P<text>.+)$")


def row_name(first_cell: str) -> str:
    """A table row's judge as the report names it: bold and the ``(induced)``/``(reference)`` mark removed."""
    name = first_cell.strip().replace("**", "")
    return re.sub(r" \((induced|reference)\)$", "", name)


def problems(markdown: str, *, embedded: bool) -> list[str]:
    """Every way the report breaks the rule: the caveat missing or after a table; a judge row of any table
    (a table whose first column is ``judge``) not defined in a line before that table, or defined as unknown."""
    lines = markdown.splitlines()
    tables = [i for i, line in enumerate(lines)
              if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))]
    out = []
    if not tables:
        return ["no table at all"]
    first_table = tables[0]
    if embedded:
        if EMBEDDED_CAVEAT_TITLE not in lines:
            out.append("no caveat")
        elif lines.index(EMBEDDED_CAVEAT_TITLE) > first_table:
            out.append("the caveat comes after the first table")
    defined: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(lines):
        match = DEFINITION.match(line)
        if match and match["name"] not in defined:
            defined[match["name"]] = (i, match["text"])
    for start in tables:
        header = [c.strip() for c in lines[start].strip("|").split("|")]
        if header[0] != "judge":
            continue
        i = start + 2
        while i < len(lines) and lines[i].startswith("|"):
            name = row_name(lines[i].strip("|").split("|")[0])
            if name not in defined:
                out.append(f"{name}: no definition (table at line {start + 1})")
            elif defined[name][0] > start:
                out.append(f"{name}: defined at line {defined[name][0] + 1}, after its table at line {start + 1}")
            elif defined[name][1] == UNDEFINED:
                out.append(f"{name}: defined as unknown")
            i += 1
    return out
