"""What a verdict line says it cost against what the server counted (issue 40 item 4): a generated 100-step
coding-agent episode judged with a segments judge (render budget 1,500 tokens) against the fake OpenAI-compatible
server on 127.0.0.1 (simulated answers; usage: `fake_server.estimate_tokens`), one window answered with an HTTP
500 and retried; then judged again from the verdict cache into a second file. Records the server's request count,
the line's ``tokens.calls`` and ``attempts``, whether the replayed line has the first line's ``evidence``, and (where
the package has prices) the line's ``tokens.usd`` at $1 / $4 per million prompt / completion tokens.

    PYTHONPATH=CHECKOUT python evals/measure_cost_lines.py --label NAME [--out evals/results/cost_lines.json]

Each run adds (or replaces) its label's entry. Machine: a 2-core VM; no real LM."""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import rubricforge_dspy
from rubricforge_dspy.apply.stream import run_judge_file
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, system_text


def episode(path: Path, n_steps: int = 100) -> None:
    messages = [{"role": "user", "content": "Fix the failing test in package 0."}]
    for i in range(1, n_steps - 1):
        messages.append({"role": "assistant", "content": f"Step {i}: run `pytest -x tests/t{i}.py`."} if i % 2 else
                        {"role": "user", "content": f"output {i}\n" + f"line {i} of the log\n" * 150})
    messages.append({"role": "assistant", "content": "The test passes now."})
    path.write_text(json.dumps({"id": "long-0", "task_id": "t0", "domain": "coding", "agent": "a",
                                "messages": messages, "reward": 1.0}) + "\n")


def answer(body: dict, n: int) -> object:
    if n == 1:
        return "http_500"  # the second request (a window) fails once; the item's next attempt passes
    if "overview" in system_text(body):
        return {"reason": "[1] the task was done", "passed": True, "score": 0.9}
    return {"findings": "none"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "cost_lines.json")
    args = parser.parse_args()
    root = Path(rubricforge_dspy.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip() or None
    options: dict[str, object] = {}
    try:
        from rubricforge_dspy.apply.pricing import Price
        options["price"] = Price(1.0, 4.0)
    except ImportError:  # a checkout without prices
        pass
    judge = SegmentsJudge(render_config=RenderConfig(max_tokens=1500))
    with tempfile.TemporaryDirectory() as folder, FakeOpenAI(answer) as fake:
        tmp = Path(folder)
        episode(tmp / "long.jsonl")
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.url + "/v1", cache=False, num_retries=0))
        run_judge_file(judge, tmp / "long.jsonl", tmp / "a.jsonl", lm=lm, cache=tmp / "cache", progress=False,
                       concurrency=1, backoff=0.0, **options)
        served = fake.n_requests
        usage = dict(fake.usage)
        run_judge_file(judge, tmp / "long.jsonl", tmp / "b.jsonl", lm=lm, cache=tmp / "cache", progress=False,
                       concurrency=1, **options)
        first = json.loads((tmp / "a.jsonl").read_text())
        replayed = json.loads((tmp / "b.jsonl").read_text())
    entry = {
        "commit": commit, "lm": "fake OpenAI-compatible server (simulated answers)", "machine": "2-core VM",
        "episode_steps": 100, "read": "segments", "render_tokens": 1500,
        "server_requests": served, "server_usage": usage,
        "line_tokens": first.get("tokens"), "line_attempts": first.get("attempts"),
        "line_calls_equal_server_requests": (first.get("tokens") or {}).get("calls") == served,
        "replayed_tokens": replayed.get("tokens"),
        "replayed_has_evidence": "evidence" in replayed,
        "replayed_evidence_equals_first": replayed.get("evidence") == first.get("evidence"),
    }
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[args.label] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    main()
