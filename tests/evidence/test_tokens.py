"""The token estimate never undercounts: on a committed sample of real and adversarial texts (whose
SmolLM2 token counts were measured by `python -m evals.token_estimate`, and are re-measured here when the
tokenizer is installed), and by properties that hold for any text."""

from __future__ import annotations

import json
import math
import random
import string
from pathlib import Path

import pytest

from rubricforge_dspy.evidence.tokens import estimate_tokens

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "token_sample.jsonl"
ALPHABETS = [string.ascii_lowercase + " ", string.ascii_letters + string.digits, string.punctuation + " \n\t",
             "".join(map(chr, range(32))), "日本語テキスト😀✈️éüß", string.printable]


def _sample() -> list[dict]:
    # split on "\n" only: texts hold U+0085 and U+2028, which splitlines() would also split on
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").split("\n") if line.strip()]


def _random_texts(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        pieces = [("".join(rng.choice(rng.choice(ALPHABETS)) for _ in range(rng.randint(0, 40))))
                  for _ in range(rng.randint(1, 6))]
        texts.append("".join(pieces))
    return texts


def test_estimate_covers_the_measured_token_counts_of_the_committed_sample():
    rows = _sample()
    assert len({row["set"] for row in rows}) >= 3 and any(row["set"] == "adversarial" for row in rows)
    under = [(row["set"], row["tokens"], estimate_tokens(row["text"]), row["text"][:60]) for row in rows
             if estimate_tokens(row["text"]) < row["tokens"]]
    assert not under, under[:5]


def test_estimate_covers_the_real_tokenizer_on_the_sample():
    from rubricforge_dspy.serve.embedded import INSTALL_HINT, EmbeddedUnavailable, find_weights

    pytest.importorskip("llama_cpp", reason=f"the real tokenizer needs llama-cpp-python, not installed: {INSTALL_HINT}")
    try:
        weights = find_weights()
    except EmbeddedUnavailable as error:  # names the missing GGUF file and says to run ./install.sh
        pytest.skip(f"the real tokenizer needs the embedded model: {error}")
    from llama_cpp import Llama

    llm = Llama(model_path=str(weights), vocab_only=True, verbose=False)
    for row in _sample():
        real = len(llm.tokenize(row["text"].encode("utf-8", "surrogatepass"), add_bos=False, special=False))
        assert real == row["tokens"], "the sample's recorded count is the tokenizer's"
        assert estimate_tokens(row["text"]) >= real, (row["set"], row["text"][:80])


def test_estimate_is_at_the_byte_bound_for_digits_punctuation_controls_and_non_ascii():
    # a byte-level tokenizer never needs more than one token per UTF-8 byte; these classes can need that many
    for text in ("0123456789" * 7, "{}[]():;,.\"'!?<>/\\|@#$%^&*-_=+~`", "\x00\x01\x1b\x7f" * 5,
                 "日本語のテキスト", "😀🚀✈️❌", "\n\n\t\n"):
        assert estimate_tokens(text) == len(text.encode("utf-8")), repr(text)


def test_estimate_is_never_below_characters_over_four():
    for text in _random_texts():
        assert estimate_tokens(text) >= math.ceil(len(text) / 4), repr(text)


def test_estimate_of_joined_lines_is_at_most_the_sum_of_the_parts():
    # the renderer budgets lines one by one and joins them with line breaks
    texts = _random_texts(seed=1)
    for a, b in zip(texts, texts[1:], strict=False):
        assert estimate_tokens(a + "\n" + b) <= estimate_tokens(a) + estimate_tokens(b) + 1, (a, b)


def test_ids_and_codes_cost_a_token_per_character_and_words_less():
    assert estimate_tokens("QQKPZJR") == 7 and estimate_tokens("4f2d9b8c") == 8 and estimate_tokens("XyZ") == 3
    assert estimate_tokens("reservation") == 6 < len("reservation")
    assert estimate_tokens("") == 0
