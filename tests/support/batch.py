"""Batch judging against the fake OpenAI server: the "right" verdict of a rendered text, an LM for the fake, the
verdict file read back (one line per id), and a generic JSONL input."""

from __future__ import annotations

import json
from collections import Counter

import dspy

from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text


def verdict_of(text: str) -> dict:
    """The 'right' verdict: a trajectory with a failed tool call fails."""
    if "(ERROR)" in text:
        return {"reason": "The booking call failed.", "passed": False, "score": 0.1}
    return {"reason": "The booking succeeded.", "passed": True, "score": 0.9}


def by_text(body: dict, n: int) -> dict:
    return verdict_of(user_text(body))


def fake_lm(fake: FakeOpenAI, timeout: float = 5.0) -> dspy.LM:
    return make_lm(LMConfig(model=fake.model, api_base=fake.url + "/v1", cache=False, num_retries=0,
                            timeout=timeout))


def read_lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def assert_one_line_per_id(path, ids) -> list[dict]:
    lines = read_lines(path)
    counts = Counter(line["id"] for line in lines)
    assert [i for i, c in counts.items() if c > 1] == []
    assert set(counts) == set(ids)
    return lines


def write_generic_jsonl(path, n: int, bad_line: bool = False) -> list[str]:
    ids = []
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n):
            ok = i % 2 == 0
            record = {
                "id": f"gen-{i}", "task_id": f"task-{i}", "domain": "retail", "agent": "a",
                "messages": [
                    {"role": "user", "content": f"Please refund order #{i}."},
                    {"role": "assistant", "content": "Done." if ok else "Refund call (ERROR): failed, sorry."},
                ],
                "reward": 1.0 if ok else 0.0, "metadata": {"gold": "CANARY-META"},
            }
            handle.write(json.dumps(record) + "\n")
            ids.append(record["id"])
            if bad_line and i == 1:
                handle.write('{"id": "broken", "messages": "nope"}\n')
    return ids
