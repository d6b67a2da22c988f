"""An adversarial corpus for the review page: trajectory text (and judge reasons, task ids, ids) that would
run script, load resources or restyle the page if it reached the HTML unescaped.

Every payload that could run sets ``window.__pwned`` or opens an alert; the browser test checks that
neither happens and that none of them became an element of the page.
"""

from __future__ import annotations

import json
from pathlib import Path

PAYLOADS = [
    "<script>window.__pwned = 1; alert(1)</script>",
    '<img src=x onerror="window.__pwned=2;alert(2)">',
    '<a href="javascript:window.__pwned=3;alert(3)" id="evil-link">click me</a>',
    '<svg onload="window.__pwned=4"><circle r="40"/></svg>',
    "<style>body { display: none !important; } #evidence { color: red }</style>",
    '<div style="background:url(javascript:alert(5))">styled</div>',
    '<iframe src="javascript:parent.__pwned=6"></iframe>',
    "</pre></span><script>window.__pwned=7</script><pre>",
    '"><script>window.__pwned=8</script>',
    "'; window.__pwned=9; //",
    "{{ 7*7 }} {% raw %}{{ config }}{% endraw %} ${7*7}",
    '<meta http-equiv="refresh" content="0;url=javascript:alert(10)">',
    '<form action="/label" method="post"><input name="choice" value="pass"></form>',
    "\uff1cscript\uff1ewindow.__pwned=11\uff1c/script\uff1e",  # full-width look-alike tags
    "<scr<script>ipt>window.__pwned=12</scr</script>ipt>",
    '<base href="javascript:alert(13)//">',
    '<object data="javascript:alert(14)"></object>',
    "<!-- --><script>window.__pwned=15</script>",
    '<math><mtext><table><mglyph><style><img src=x onerror="window.__pwned=16">',
]


def records() -> list[dict]:
    """Generic JSONL trajectories, each carrying payloads in every kind of text the render quotes."""
    out = []
    for number, payload in enumerate(PAYLOADS):
        other = PAYLOADS[(number + 1) % len(PAYLOADS)]
        messages = [
            {"role": "user", "content": f"Please book flight HAT001. {payload}"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "book_reservation", "arguments": {"flight": payload}}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "book_reservation", "content": f"Error: {other}"},
            {"role": "assistant", "content": f"Done! {payload}"},
        ]
        ident = f"xss-{number}" if number % 3 else f"xss-{number}<script>window.__pwned=99</script>"
        out.append({"id": ident, "task_id": f"task{number}<b>bold</b>", "domain": "airline", "agent": "adversary",
                    "messages": messages, "reward": 0.0})
    return out


def write_corpus(directory: Path) -> tuple[Path, Path]:
    """The corpus as a data file and a verdict file whose reasons carry payloads too."""
    data, verdicts = directory / "xss.jsonl", directory / "xss-verdicts.jsonl"
    rows = records()
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = []
    for number, row in enumerate(rows):
        lines.append({"id": row["id"], "task_id": row["task_id"], "passed": number % 2 == 0,
                      "score": 0.8 if number % 2 == 0 else 0.2,
                      "abstained": False, "reason": f"criterion 1 {PAYLOADS[number]}", "label": None,
                      "stage": "judge<script>window.__pwned=98</script>" if number % 4 == 0 else "escalated"})
    verdicts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return data, verdicts
