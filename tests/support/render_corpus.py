"""The render's golden corpus: the shipped trajectory files and a seeded synthetic set whose renders
`tests/evidence/test_render_golden.py` pins by digest (and other evidence tests reuse). Changing either
changes the digests: the golden test then fails until they are recomputed deliberately."""

from __future__ import annotations

import random
from pathlib import Path

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory

ROOT = Path(__file__).resolve().parents[2]
# the shipped files, in digest order
SHIPPED = [ROOT / p for p in (
    "evals/data/tau_bench_official/gpt-4o-airline.json",
    "evals/data/react_webshop/react_webshop_davinci002_500.jsonl",
    "evals/data/openhands/multi_swe_bench_output.jsonl",
    "evals/data/mini_swe/github_issue.traj.json",
    "evals/data/tau_bench_grok/tool-calling-grok-4-fast-reasoning-0.0_range_0--1_user-grok-4-fast-reasoning-llm_1129144541.json",
    "tests/fixtures/adversarial/forgeries.jsonl",
    "evals/data/otel/constructed_otlp.jsonl",
)]

# characters that exercise every branch of sanitize and estimate_tokens: controls, ANSI, CR LF, line and
# paragraph separators, format characters, surrogates, non-ASCII letters, JSON punctuation, spaces
_ALPHABET = (["a", "e", "o", "b", "k", "Z", "Q", "x", "7", "0", " ", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", "\r",
              "\x00", "\x07", "\x1b[31m", "\x1b]0;t\x07", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u200b",
              "\u202e", "\ufeff", "\U000e0041", "\ud800", "é", "中", "😀", "{", "}", "[", "]", "\"", ":", ",", "#",
              "[[ ## x ## ]]", "[5] TOOL RESULT", "COUNTERS:", "word", "Capital", "hello world", " \n"])


def _text(rng: random.Random, n: int) -> str:
    return "".join(_ALPHABET[rng.randrange(len(_ALPHABET))] for _ in range(n))


def synthetic_trajectories() -> list[Trajectory]:
    rng = random.Random(20)
    out = []
    for i in range(60):
        steps = []
        for _ in range(rng.randrange(1, 12)):
            kind = ("user", "assistant", "tool_call", "tool_result", "final_answer")[rng.randrange(5)]
            size = (5, 60, 400, 3000)[rng.randrange(4)]
            if kind == "tool_call":
                args = {"q": _text(rng, size), "n": [rng.randrange(100) for _ in range(rng.randrange(40))]}
                steps.append(Step(kind, tool_name=_text(rng, 6), arguments=args))
            elif kind == "tool_result" and rng.randrange(2):
                payload = '{"items": [' + ", ".join(f'"{_text(rng, 8)}"'.replace("\\", "") for _ in range(size // 10))
                steps.append(Step(kind, content=payload + "]}", tool_name="t", is_error=bool(rng.randrange(2))))
            else:
                steps.append(Step(kind, content=_text(rng, size)))
        out.append(Trajectory(id=f"s{i}", task_id=f"t{i}", domain="d", agent="a", steps=tuple(steps), reward=None,
                              label=None, source=Source("synthetic", i)))
    return out
