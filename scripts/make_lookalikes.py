"""Write rubricforge_dspy/evidence/lookalikes.json: the characters that look like the quote tags' letters and
delimiters, for the renderer's nonce choice and quoting (`rubricforge_dspy.evidence.render`).

    pip install confusable-homoglyphs==3.3.1   # Unicode's confusables.txt as JSON (development only)
    python3 scripts/make_lookalikes.py          # rewrite the table
    python3 scripts/make_lookalikes.py --check  # exit 1 if the table differs from what this writes

The table is package data (read once, on first use, by `rubricforge_dspy.evidence._lookalikes`). It is
generated once and committed, so a render never depends on the installed Unicode data (the
render's text is part of every judge's fingerprint). For every character it maps:

- each member of a confusable class (Unicode TR39 confusables, taken as equivalence classes over single
  characters) that holds an ASCII letter, to that letter in lowercase (the class of ``l`` holds ``1``, ``I``
  and ``|``; the class of ``O`` holds ``0``); plus `EXTRA` below, letters Unicode does not link to an ASCII
  one but that read as one (Cyrillic ``к``, Greek ``κ``, small capitals);
- every character whose NFKC form, with combining marks removed, is made of such letters (full-width and
  mathematical letters, ligatures, accented letters, circled letters);
- every combining mark (categories Mn and Me) to nothing;
- every character whose lowercase maps, to what its lowercase maps to (the fold lowercases after mapping).

It also lists the look-alikes of ``<``, ``/`` and ``>``: their confusable classes, what NFKC folds to them
(not what only a combining mark separates from them: ``≮`` is not ``<``), and the angle brackets and slashes
of `EXTRA_DELIMITERS`.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "rubricforge_dspy" / "evidence" / "lookalikes.json"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
DELIMITERS = "</>"
EXTRA = {
    "k": "\u043a\u03ba\u0138\u1d0b\u03f0\u2c95\u049b\u049d\u04a1",  # Cyrillic ka, Greek kappa, kra, small capital K
    "t": "\u03c4\u0442\u1d1b",  # Greek tau, Cyrillic te, small capital T
    "n": "\u043f\u0274\u03b7",  # Cyrillic pe, small capital N, Greek eta
    "m": "\u043c\u1d0d",  # Cyrillic em, small capital M
    "b": "\u0432\u0299\u044c",  # Cyrillic ve, small capital B, soft sign
    "r": "\u0433\u0280",  # Cyrillic ghe, small capital R
    "u": "\u0438\u03c5\u1d1c",  # Cyrillic i, Greek upsilon, small capital U
    "v": "\u03bd\u1d20",  # Greek nu, small capital V
    "i": "\u0131\u03b9\u0456\u026a",  # dotless i, Greek iota, Cyrillic i, small capital I
    "l": "\u029f\u04cf",  # small capital L, Cyrillic palochka
    "g": "\u0261\u0262",  # script g, small capital G
    "a": "\u1d00\u0251",  # small capital A, alpha
    "e": "\u1d07\u0435",  # small capital E, Cyrillic ie
    "d": "\u1d05\u0501",  # small capital D, Cyrillic komi de
    "f": "\ua730",  # small capital F
    "o": "\u1d0f\u03bf\u043e",  # small capital O, Greek omicron, Cyrillic o
    "p": "\u1d18\u0440\u03c1",  # small capital P, Cyrillic er, Greek rho
    "s": "\ua731\u0455",  # small capital S, Cyrillic dze
    "z": "\u1d22",  # small capital Z
}
EXTRA_DELIMITERS = {
    "<": "\u2039\u2329\u27e8\u3008\u276c\u276e\u2770\u29fc\ufe64\uff1c\u1438\u02c2\u16b2\U0001d236",
    "/": "\u2215\u2044\uff0f\u29f8\u2571\u27cb\u3033\u30ce\u4e3f\u2f03\u31d3\u1735\u2041\u2cc6",
    ">": "\u203a\u232a\u27e9\u3009\u276d\u276f\u2771\u29fd\ufe65\uff1e\u1433\u02c3\u16b3",
}


def _classes() -> dict[str, str]:
    """Each character of a confusable class that holds an ASCII letter or delimiter, to that ASCII
    character (a letter in lowercase)."""
    data = json.loads(importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text())
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    for key, homoglyphs in data.items():
        for homoglyph in homoglyphs:
            char = homoglyph["c"]
            if len(key) == 1 and len(char) == 1:
                a, b = find(key), find(char)
                if a != b:
                    parent[a] = b
    members: dict[str, set[str]] = {}
    for char in set(parent) | {k for k in data if len(k) == 1}:
        members.setdefault(find(char), set()).add(char)
    out: dict[str, str] = {}
    for target in LETTERS + LETTERS.upper() + DELIMITERS:
        group = members.get(find(target), {target})
        ascii_members = {c for c in group if c.isascii() and (c.isalpha() or c in DELIMITERS)}
        names = {c.lower() for c in ascii_members}
        assert len(names) == 1 or names == {"l", "i"}, (target, names)  # one ASCII letter per class
        value = "l" if "l" in names else target.lower()
        for char in group:
            if char in out and out[char] != value:
                raise AssertionError(f"{char!r} looks like both {out[char]!r} and {value!r}")
            out[char] = value
    for value, chars in {**EXTRA, **EXTRA_DELIMITERS}.items():
        for char in chars:
            out.setdefault(char, value)
    return out


def build() -> tuple[dict[int, str], dict[str, str]]:
    """The fold (code point to replacement) and the delimiters' look-alikes (ASCII character to all of
    its look-alikes, itself included)."""
    classes = _classes()

    def fold(char: str, depth: int = 0) -> str:
        text = unicodedata.normalize("NFKC", char)
        text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) not in ("Mn", "Me"))
        out = []
        for c in text:
            if c in classes:
                out.append(classes[c])
            elif c.lower() != c and depth < 2:
                out.append(fold(c.lower(), depth + 1))
            else:
                out.append(c)
        return "".join(out)

    table: dict[int, str] = {}
    delimiters: dict[str, set[str]] = {d: {d} for d in DELIMITERS}
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        folded = fold(char)
        if classes.get(char) in delimiters or unicodedata.normalize("NFKC", char) in delimiters:
            delimiters[classes.get(char) or unicodedata.normalize("NFKC", char)].add(char)
        if folded == char.lower() and char not in classes:
            continue  # the fold's lowercasing does it
        if folded == "" or (folded.isascii() and any(c in LETTERS for c in folded)):
            table[code] = folded
    return table, {d: "".join(sorted(chars)) for d, chars in delimiters.items()}


def _ranges(codes: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for code in sorted(codes):
        if out and out[-1][1] == code - 1:
            out[-1] = (out[-1][0], code)
        else:
            out.append((code, code))
    return out


def render_table(table: dict[int, str], delimiters: dict[str, str], version: str, unicode_version: str) -> str:
    """The JSON text of the table: `fold` maps each replacement (an ASCII letter, lowercase; "" for a
    combining mark) to the inclusive code point ranges that fold to it; one line per replacement, so a
    regeneration's diff is readable."""
    by_value: dict[str, list[int]] = {}
    for code, value in table.items():
        by_value.setdefault(value, []).append(code)
    head = {"generator": "scripts/make_lookalikes.py (do not edit)", "unicode_version": unicode_version,
            "confusable_homoglyphs_version": version, "delimiters": delimiters}
    lines = ["{"] + [f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in head.items()] + ['  "fold": {']
    fold = [f"    {json.dumps(value)}: {json.dumps([list(r) for r in _ranges(by_value[value])], separators=(',', ':'))}"
            for value in sorted(by_value)]
    lines.append(",\n".join(fold))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def render_json() -> str:
    from importlib.metadata import version as installed

    table, delimiters = build()
    return render_table(table, delimiters, installed("confusable-homoglyphs"), unicodedata.unidata_version)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is out of date")
    args = parser.parse_args(argv)
    text = render_json()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run python3 scripts/make_lookalikes.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
