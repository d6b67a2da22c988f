"""A conservative, tokenizer-free token estimate: it should never count fewer tokens than a real
tokenizer does, so a render sized to a budget fits the judge's context.

Characters / 4 undercounts the text agents produce (JSON, digits, ids, control bytes) by up to ~4x:
byte-level BPE tokenizers (SmolLM2, Qwen, Llama 3, GPT-4) split digits one by one, give most
punctuation and every control byte a token of its own, and need several tokens for a random id. The
estimate charges each piece of text by its class:

- an ASCII letter run that reads like a word (lowercase or Capitalized, vowels at least every third
  letter, at least a quarter vowels) costs ``ceil(len / 2)`` (at least 1), plus 1 for a capital;
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
from functools import lru_cache

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


@lru_cache(maxsize=1 << 16)
def _letters_cost(run: str) -> int:
    if not word_like(run):
        return len(run)
    capital = int(run[0].isupper())  # a capital often starts a token of its own ("Qy" is two)
    return capital + max(1 - capital, math.ceil((len(run) - capital) / WORD_LETTERS_PER_TOKEN))


@lru_cache(maxsize=1 << 16)
def _letters_cost_bytes(run: bytes) -> int:
    return _letters_cost(run.decode("ascii"))


# Every ASCII character is a letter, a space or "other" (digit, punctuation, control: 1 token each); the
# byte tables below count the classes with C-speed bytes methods instead of a regex pass per class.
_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))
_LETTER_RUNS = bytes(c if c in _ASCII_LETTERS else 32 for c in range(256))  # non-letters become spaces
_LETTER_AS_A = bytes(97 if c in _ASCII_LETTERS else c for c in range(256))


def estimate_tokens(text: str) -> int:
    """Conservative token count of `text` (see the module docstring); deterministic, pure Python."""
    if text.isascii():
        data, non_ascii_chars, non_ascii_bytes = text.encode("ascii"), 0, 0
    else:  # each non-ASCII character (a lone surrogate too) becomes one "?": runs and adjacency are kept
        data = text.encode("ascii", "replace")
        ascii_chars = len(text.encode("ascii", "ignore"))
        non_ascii_chars = len(text) - ascii_chars
        non_ascii_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    runs = data.translate(_LETTER_RUNS).split()
    letters = sum(map(_letters_cost_bytes, runs))
    n_spaces = data.count(b" ")
    spaces = n_spaces - data.translate(_LETTER_AS_A).count(b" a")  # a single space merges into the word after it
    other = len(data) - sum(map(len, runs)) - n_spaces - non_ascii_chars
    return letters + spaces + other + non_ascii_bytes
