"""Records for the ingest tests: the shipped airline and webshop records as generic JSONL, random mutations of
them, and a small generic record."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

from rubricforge_dspy.data.export import record_of
from rubricforge_dspy.data.formats import load_trajectories

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals/data/tau_bench_official/gpt-4o-airline.json"
WEBSHOP = ROOT / "evals/data/react_webshop/react_webshop_davinci002_500.jsonl"

ODD_VALUES = [None, True, False, 0, 1, 2, -1, 0.5, 1.0, 3.0, float("nan"), "", "x", "function", "tool", [], [1], {},
              {"type": "text"}, {"name": ""}, {"name": "f", "arguments": 3}, [{"type": 1}], [{"type": "t", "text": 2}]]


def _mutations(record: dict, rng: random.Random, n: int):
    """`n` copies of `record` with one field (top level or in a message) set, added or removed at random."""
    for _ in range(n):
        mutated = copy.deepcopy(record)
        target = mutated
        if rng.random() < 0.7 and mutated.get("messages"):
            target = rng.choice(mutated["messages"])
            if isinstance(target, dict) and target.get("tool_calls") and rng.random() < 0.4:
                call = rng.choice(target["tool_calls"])
                target = call["function"] if rng.random() < 0.5 else call
        keys = list(target) + ["role", "content", "name", "tool_calls", "function_call", "action", "observation",
                               "tool_call_id", "is_error", "error", "final_answer", "extra", "type", "arguments",
                               "label", "trial", "metadata", "reward", "task_id", "id"]
        key = rng.choice(keys)
        if rng.random() < 0.2 and key in target:
            del target[key]
        else:
            target[key] = copy.deepcopy(rng.choice(ODD_VALUES))
        yield mutated


def _records() -> list[dict]:
    trajectories = list(load_trajectories(AIRLINE))[:20] + list(load_trajectories(WEBSHOP))[:20]
    return [json.loads(json.dumps(record_of(t))) for t in trajectories]


def _generic(i: int, **extra) -> dict:
    return {"id": f"t{i}", "task_id": f"task{i % 3}", "reward": i % 2, "domain": "d", "agent": "a",
            "messages": [{"role": "user", "content": f"do {i}"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "Error: no", "is_error": i % 4 == 0},
                         {"role": "assistant", "content": f"done {i}"}], **extra}
