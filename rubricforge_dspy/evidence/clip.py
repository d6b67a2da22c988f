"""Text hygiene and size cuts for rendered steps: what the judge reads of one long observation.

- `sanitize`: keeps newlines, tabs and indentation (code and shell output stay readable), strips
  trailing spaces and collapses runs of blank lines to one; reads CR LF, a lone CR and the Unicode line
  and paragraph separators (U+2028, U+2029) as newlines; removes NUL, every other C0/C1 control
  character (NEL U+0085 too; ANSI escape sequences whole) and every invisible format character
  (zero-width spaces and joiners, bidirectional overrides, the byte-order mark, tag characters) and
  counts them, so the render can say so.
- `fit`: cuts a text to a token budget (`rubricforge_dspy.evidence.tokens.estimate_tokens`). JSON objects and
  arrays are trimmed by structure: every key is kept, long arrays keep their first and last items with a
  ``"... N more items"`` marker, long strings keep head and tail with a ``"... N chars ..."`` marker.
  Anything else (shell output, HTML, file dumps) keeps its head and tail, cut at line breaks when it
  can, around an explicit ``[... N chars elided ...]`` marker. Given a ``fence`` (the renderer's quote
  tags), that marker is written outside the quote: ``head</q>\n[... N chars elided ...]\n<q>tail``.
  JSON trimmed by structure is written back with control, format and line-separator characters
  escaped (``\\u2028``), so a cut never brings back what `sanitize` removed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rubricforge_dspy.evidence.tokens import estimate_tokens

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_SEPARATORS = re.compile("\r\n?|[\u2028\u2029]")
# Unicode format characters (category Cf): zero-width space/joiners, bidi embeddings and overrides,
# word joiner, invisible operators, BOM, interlinear annotation, tag characters; plus U+180E.
_FORMAT = re.compile("[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
                     "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
                     "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029]|" + _FORMAT.pattern)
# any character one of the passes above would touch: text without one skips them all
_SPECIAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff" + _FORMAT.pattern[1:])
_TRAILING = re.compile(r"[ \t]+\n")
_BLANK_RUNS = re.compile(r"\n{3,}")
TEXT_MARKER = "[... {n} chars elided ...]"
ITEMS_MARKER = "... {n} more items"
KEYS_MARKER = "... {n} more keys"
STRING_MARKER = " ... {n} chars ... "


def sanitize(text: str) -> tuple[str, int]:
    """`text` with control characters removed and blank-line runs collapsed; and how many control
    characters (an ANSI escape sequence counts as one) were removed."""
    text = str(text)
    ansi = control = invisible = 0
    if _SPECIAL.search(text) is not None:
        text = _LINE_SEPARATORS.sub("\n", text)
        text, ansi = _ANSI.subn("", text)
        text, control = _CONTROL.subn("", text)
        text, invisible = _FORMAT.subn("", text)
        text = _SURROGATE.sub("\ufffd", text)  # undecodable bytes a loader kept: not valid text for an LM
    if " \n" in text or "\t\n" in text:
        text = _TRAILING.sub("\n", text)
    if "\n\n\n" in text:
        text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip("\n").rstrip(), ansi + control + invisible


def _head_tail(text: str, keep: int, fence: tuple[str, str] = ("", "")) -> str:
    """`text` cut to about `keep` characters: head and tail around the elision marker, at line breaks
    when one is near the cut; the marker outside `fence` (open, close) when given."""
    if len(text) <= keep:
        return text
    head_n, tail_n = keep // 2, keep - keep // 2
    head, tail = text[:head_n], text[len(text) - tail_n:]
    newline = head.rfind("\n")
    if newline >= head_n * 2 // 3:
        head = head[:newline]
    newline = tail.find("\n")
    if 0 <= newline <= tail_n // 3:
        tail = tail[newline + 1:]
    elided = len(text) - len(head) - len(tail)
    sep = "\n" if "\n" in text else " "
    return f"{head}{fence[1]}{sep}{TEXT_MARKER.format(n=elided)}{sep}{fence[0]}{tail}"


def fit_text(text: str, max_tokens: int, fence: tuple[str, str] = ("", "")) -> str:
    """`text` (head and tail) within `max_tokens` estimated tokens; the cut marker outside `fence`
    ((open, close) quote tags the caller wraps the result in) when given."""
    cost = estimate_tokens(text)
    if cost <= max_tokens:
        return text
    keep = max(0, len(text) * max_tokens // max(cost, 1))
    for _ in range(120):
        cut = _head_tail(text, keep, fence)
        if estimate_tokens(cut) <= max_tokens or keep == 0:
            return cut
        keep = keep * 19 // 20
    return _head_tail(text, 0, fence)


def shrink_json(value: Any, max_items: int, max_string: int, max_keys: int | None = None) -> Any:
    """A copy of a JSON value with long arrays, strings (and, with `max_keys`, objects) shortened."""
    if isinstance(value, str):
        if len(value) <= max_string:
            return value
        head = max(1, max_string // 2)
        tail = max(1, max_string - head)
        return value[:head] + STRING_MARKER.format(n=len(value) - head - tail) + value[-tail:]
    if isinstance(value, list):
        items = [shrink_json(v, max_items, max_string, max_keys) for v in value]
        if len(items) > max_items + 1:
            head = max(1, max_items - max_items // 3)
            tail = max_items - head
            items = [*items[:head], ITEMS_MARKER.format(n=len(items) - head - tail), *items[len(items) - tail:]]
        return items
    if isinstance(value, dict):
        keys = list(value)
        shown = keys if max_keys is None or len(keys) <= max_keys + 1 else keys[:max_keys]
        out = {k: shrink_json(value[k], max_items, max_string, max_keys) for k in shown}
        if len(shown) < len(keys):
            out["..."] = KEYS_MARKER.format(n=len(keys) - len(shown))
        return out
    return value


# From generous to strict: (items kept per array, characters kept per string, keys kept per object).
_LADDER = [(items, chars, keys) for keys in (None, 8, 3) for items, chars in
           ((20, 400), (10, 200), (6, 120), (4, 80), (3, 60), (2, 40), (1, 24))]


def as_json(text: str) -> dict[str, Any] | list[Any] | None:
    """The JSON object or array `text` holds, else None."""
    stripped = text.strip()
    if stripped[:1] not in ("{", "[") or len(stripped) < 2:
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


def _escape_unsafe(dumped: str) -> str:
    """JSON text with C1 control, format and line-separator characters written as escapes (they only
    occur inside strings, so the JSON stays valid)."""
    return _UNSAFE_IN_JSON.sub(lambda m: json.dumps(m.group(), ensure_ascii=True)[1:-1], dumped)


def fit(text: str, max_tokens: int, fence: tuple[str, str] = ("", "")) -> str:
    """`text` within `max_tokens` estimated tokens: unchanged when it fits, JSON trimmed by structure,
    anything else cut head and tail (see the module docstring). `fence`: the (open, close) quote tags
    the caller wraps the result in; a head-and-tail cut closes and reopens them around its marker."""
    if estimate_tokens(text) <= max_tokens:
        return text
    value = as_json(text)
    if value is not None:
        for items, chars, keys in _LADDER:
            candidate = _escape_unsafe(json.dumps(shrink_json(value, items, chars, keys), ensure_ascii=False))
            if estimate_tokens(candidate) <= max_tokens:
                return candidate
        text = candidate
    return fit_text(text, max_tokens, fence)
