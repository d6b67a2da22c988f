"""Prompt tokens per trajectory on the demo data: what the README's "about N prompt tokens" points to.

For each trajectory of the bundled demo sample (`pipeline.demo.demo_sample`, the embedded preset's 10 tasks and
all of the sample file), the judge's whole prompt (DSPy's ChatAdapter messages: the seed rubric as instructions
and the rendered trajectory at the embedded preset's size) is counted with the package's token estimator
(`evidence.tokens.estimate_tokens`, which never undercounts a real tokenizer on the measured data). No LM runs.

    PYTHONPATH=. python evals/prompt_tokens.py --out evals/results/prompt_tokens.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics

import dspy

from rubricforge_dspy.core.presets import EMBEDDED, SERVER
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.evidence.tokens import estimate_tokens
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.pipeline.demo import DEMO_DATA, demo_sample


def _smollm2_tokenizer():
    """The embedded model's own tokenizer (its GGUF vocabulary, llama.cpp), or None when not installed."""
    try:
        import llama_cpp

        from rubricforge_dspy.serve.embedded import find_weights

        model = llama_cpp.Llama(model_path=str(find_weights()), vocab_only=True, verbose=False)
    except Exception:  # noqa: BLE001 - optional: the estimate is still measured
        return None
    return lambda text: len(model.tokenize(text.encode("utf-8"), add_bos=False, special=True))


def prompt_tokens(trajectories, preset, count=estimate_tokens) -> list[int]:
    judge = TrajectoryJudge(render_config=RenderConfig.of(preset))
    signature = judge.predictors()[0].signature
    adapter = dspy.ChatAdapter()
    out = []
    for t in trajectories:
        messages = adapter.format(signature, demos=[], inputs={"trajectory": render_trajectory(t, judge.render_config)})
        out.append(sum(count(m["content"]) for m in messages))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sample, _ = demo_sample(None, EMBEDDED.demo_tasks)
    result = {"benchmark": "judge prompt tokens per trajectory, demo data", "data": DEMO_DATA.name,
              "lm": "none (no LM call: the prompt is formatted, not sent)",
              "estimator": "evidence.tokens.estimate_tokens",
              "machine": {"cpus": 2, "python": platform.python_version()}, "presets": {}}
    tokenizer = _smollm2_tokenizer()
    result["tokenizer"] = "SmolLM2-135M-Instruct's GGUF vocabulary (llama.cpp)" if tokenizer else None
    for preset in (EMBEDDED, SERVER):
        for name, count in (("estimated", estimate_tokens), ("smollm2_tokens", tokenizer)):
            if count is None:
                continue
            counts = prompt_tokens(sample, preset, count)
            result["presets"].setdefault(preset.name, {"n": len(counts), "render_tokens_cap": preset.render_tokens})
            result["presets"][preset.name][name] = {"mean": round(statistics.mean(counts), 1),
                                                    "median": statistics.median(counts), "min": min(counts),
                                                    "max": max(counts)}
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
        handle.write("\n")
    print(json.dumps(result["presets"]))


if __name__ == "__main__":
    main()
