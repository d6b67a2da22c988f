"""A conservative, tokenizer-free token estimate: it should never count fewer tokens than a real
tokenizer does, so a render sized to a budget fits the judge's context.

Characters / 4 undercounts the text agents produce (JSON, digits, ids, control bytes) by up to ~4x:
byte-level BPE tokenizers (SmolLM2, Qwen, Llama 3, GPT-4) split digits one by one, give most
punctuation and every control byte a token of its own, and need several tokens for a random id. The
estimate charges each piece of text by its class:

- an ASCII letter run that reads like a word (lowercase or Capitalized, vowels at least every third
  letter, at least a quarter vowels) costs ``ceil(len / 2)`` (at least 1);
- any other letter run (``ABC123`` codes, ``QQKPZJR``, hex, base64, camelCase) costs 1 per letter;
- a digit, an ASCII punctuation mark, a newline, a tab or a control byte costs 1;
- a run of spaces costs one token per space beyond the first, plus one when it is not followed by a
  letter (a single space merges into the word after it);
- a non-ASCII character costs its UTF-8 byte count (a byte-level tokenizer never needs more).

`python -m evals.token_estimate` measures it against the SmolLM2 tokenizer on every shipped data set
and an adversarial set (evals/results/token_estimate.json). Known limit: a random string of lowercase
letters that happens to read like a word can cost more than ``len / 2`` tokens; the benchmark reports
that case separately.
"""

from __future__ import annotations

import math
import re

_PIECE = re.compile(r"[A-Za-z]+|[ ]+|[\x00-\x7f]|[^\x00-\x7f]+")
_VOWELS = frozenset("aeiouyAEIOUY")
_CLUSTER = re.compile(r"[^aeiouyAEIOUY]{3,}")
WORD_LETTERS_PER_TOKEN = 2


def word_like(run: str) -> bool:
    """True for an ASCII letter run that reads like a word: lowercase or Capitalized, no three
    consonants in a row, and at least a quarter vowels."""
    body = run[1:] if run[:1].isupper() else run
    if body and not body.islower():
        return False
    vowels = sum(c in _VOWELS for c in run)
    return vowels * 4 >= len(run) and not _CLUSTER.search(run)


def estimate_tokens(text: str) -> int:
    """Conservative token count of `text` (see the module docstring); deterministic, pure Python."""
    total = 0
    for match in _PIECE.finditer(text):
        piece = match.group()
        first = piece[0]
        if first.isascii() and first.isalpha():
            total += max(1, math.ceil(len(piece) / WORD_LETTERS_PER_TOKEN)) if word_like(piece) else len(piece)
        elif first == " ":
            after = text[match.end():match.end() + 1]
            total += len(piece) - 1 + (0 if after.isascii() and after.isalpha() else 1)
        elif first.isascii():
            total += 1
        else:
            total += len(piece.encode("utf-8", "surrogatepass"))
    return total
