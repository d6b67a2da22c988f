"""Does `rubricforge_dspy.evidence.tokens.estimate_tokens` ever count fewer tokens than a real tokenizer?

    python -m evals.token_estimate [--out evals/results/token_estimate.json]
        [--sample tests/fixtures/token_sample.jsonl]

The reference is the SmolLM2-135M tokenizer (the embedded judge's: llama-cpp-python,
``Llama(weights, vocab_only=True).tokenize``, no BOS, special tokens not parsed). Measured texts:

- per data set (evals/data/* and, when present, ../shared/data/raw/*): every rendered trajectory under
  each preset and in full (no budget), and every step's text;
- an adversarial set (seeded): digits, JSON, raw control bytes, non-ASCII scripts and emoji, indented
  code, HTML, hex, base64, UUIDs, upper-case codes, whitespace runs;
- a known limit, reported apart and not covered by the guarantee: random lower-case letter strings
  that read like words.

Per set: texts, undercounts (real > estimate), the max / p99 / median of real / estimate, and the
total real / total estimate (how much budget the caution costs); and the same for render version 1's
characters / 4. `--sample` writes the texts with the
highest ratio of each set (at most 2,000 characters each) for `tests/evidence/test_render.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import string
import sys
import time
import uuid
from pathlib import Path

from rubricforge_dspy.core.presets import PRESETS
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.evidence.tokens import estimate_tokens, word_like

ROOT = Path(__file__).resolve().parent
DATA_ROOTS = {"evals/data": ROOT / "data", "shared/data/raw": ROOT.parent.parent / "shared" / "data" / "raw"}
FULL = RenderConfig(max_tokens=10**9, max_step_chars=10**9)
SAMPLE_PER_SET = 12


def tokenizer():
    """`count(text) -> int` with the SmolLM2 tokenizer, and its name."""
    from llama_cpp import Llama

    from rubricforge_dspy.serve.embedded import WEIGHTS_FILE, find_weights

    llm = Llama(model_path=str(find_weights()), vocab_only=True, verbose=False)

    def count(text: str) -> int:
        return len(llm.tokenize(text.encode("utf-8", "surrogatepass"), add_bos=False, special=False))

    return count, f"SmolLM2-135M-Instruct tokenizer ({WEIGHTS_FILE}, llama-cpp-python, no BOS)"


def dataset_texts(directory: Path) -> list[str]:
    trajectories = load_trajectories(directory, on_error="skip")
    texts = []
    for t in trajectories:
        texts += [render_trajectory(t, RenderConfig.of(preset)) for preset in PRESETS.values()]
        texts.append(render_trajectory(t, FULL))
        texts += [s.content if s.kind != "tool_call" else json.dumps(s.arguments, ensure_ascii=False)
                  for s in t.steps]
    return [text for text in texts if text]


def adversarial_texts(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pick = lambda alphabet, n: "".join(rng.choice(alphabet) for _ in range(n))  # noqa: E731
    texts = []
    for n in (1, 2, 5, 17, 100, 1000):
        texts.append(pick(string.digits, n))
        texts.append(" ".join(pick(string.digits, rng.randint(1, 12)) for _ in range(n)))
        texts.append(pick(string.hexdigits.lower(), n))
        texts.append(pick(string.ascii_letters + string.digits + "+/=", n))
        texts.append(pick(string.ascii_uppercase + string.digits, n))
        texts.append(pick(string.ascii_uppercase, n))
        texts.append(pick(string.punctuation, n))
        texts.append(pick("".join(chr(c) for c in range(32)) + "\x7f", n))  # raw C0 control bytes
        texts.append(pick("".join(chr(c) for c in range(0x80, 0xA0)), n))  # C1 controls
        texts.append(pick("日本語のテキスト中文字符한국어", n))
        texts.append(pick("ÄÖÜäöüßéèêçñåøæ", n))
        texts.append(pick("абвгдежзийклмнопрстуфхцчшщыэюя", n))
        texts.append(pick("العربيةمرحبا", n))
        texts.append(pick("😀🚀✈️❌✅🔥👍🏽", n))
        texts.append(pick(" \t\n", n))
        texts.append(" " * n + "x")
    for _ in range(30):
        texts.append(json.dumps({pick(string.ascii_lowercase, 6): [rng.random() * 10**rng.randint(0, 6)
                                                                   for _ in range(rng.randint(1, 30))],
                                 "id": f"{rng.getrandbits(128):032x}", "ok": rng.random() < 0.5, "n": None},
                                indent=rng.choice([None, 2])))
        texts.append(str(uuid.UUID(int=rng.getrandbits(128))))
    code = Path(__file__).read_text(encoding="utf-8")
    texts += [code, code.replace("    ", "\t"), "\n".join(line.strip() for line in code.splitlines())]
    texts.append("<html><body>" + "".join(f'<div class="row r{i}"><a href="/p/{i}?q={i * 7}">Item {i}</a></div>'
                                           for i in range(200)) + "</body></html>")
    return texts


def random_word_like(seed: int = 1, n: int = 3000) -> list[str]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 16)))
        if word_like(text):
            out.append(text)
    return out


def measure(texts: list[str], count) -> tuple[dict, list[tuple[float, str]]]:
    pairs = [(count(t), estimate_tokens(t), t) for t in texts]
    rows = sorted(((real / max(1, estimate), t) for real, estimate, t in pairs), key=lambda r: r[0])
    ratios = [r for r, _ in rows]
    real = sum(p[0] for p in pairs)
    estimate = sum(p[1] for p in pairs)
    summary = {
        "texts": len(texts), "undercounts": sum(r > 1 for r in ratios),
        "max_ratio": round(ratios[-1], 4), "p99_ratio": round(ratios[int(0.99 * (len(ratios) - 1))], 4),
        "median_ratio": round(ratios[len(ratios) // 2], 4),
        "total_real_over_total_estimate": round(real / max(1, estimate), 4),
        "characters_over_4": {  # render version 1's estimate, for comparison
            "undercounts": sum(r > -(-len(t) // 4) for r, _, t in pairs),
            "max_ratio": round(max(r / max(1, -(-len(t) // 4)) for r, _, t in pairs), 4),
            "total_real_over_total_estimate": round(real / max(1, sum(-(-len(t) // 4) for t in texts)), 4)},
    }
    return summary, rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "results" / "token_estimate.json"))
    parser.add_argument("--sample", default=None, help="write the highest-ratio texts of each set here (JSONL)")
    args = parser.parse_args(argv)
    started = time.time()
    count, name = tokenizer()
    sets: dict[str, list[str]] = {}
    for prefix, root in DATA_ROOTS.items():
        if root.is_dir():
            for directory in sorted(p for p in root.iterdir() if p.is_dir()):
                sets[f"{prefix}/{directory.name}"] = dataset_texts(directory)
    sets["adversarial"] = adversarial_texts()
    results, sample = {}, []
    for label, texts in sets.items():
        results[label], rows = measure(texts, count)
        print(f"{label}: {results[label]}", file=sys.stderr)
        sample += [{"set": label, "text": t, "tokens": count(t)} for _, t in
                   [r for r in rows if len(r[1]) <= 2000][-SAMPLE_PER_SET:]]
    limit, _ = measure(random_word_like(), count)
    result = {
        "command": "python -m evals.token_estimate", "tokenizer": name,
        "estimator": "rubricforge_dspy.evidence.tokens.estimate_tokens",
        "machine": f"{platform.machine()}, {platform.system()}, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "wall_time_s": round(time.time() - started, 1),
        "ratio": "real tokens / estimated tokens per text (> 1 is an undercount)",
        "sets": results,
        "undercounts_total": sum(r["undercounts"] for r in results.values()),
        "known_limit_random_word_like_lowercase": {**limit, "covered": False},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.sample:
        Path(args.sample).parent.mkdir(parents=True, exist_ok=True)
        with open(args.sample, "w", encoding="utf-8") as handle:
            for row in sample:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"undercounts: {result['undercounts_total']} (known limit: {limit['undercounts']} of {limit['texts']} "
          f"random word-like strings)", file=sys.stderr)
    return 1 if result["undercounts_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
