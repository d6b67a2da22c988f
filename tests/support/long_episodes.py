"""Long coding-agent-like episodes written to JSONL (more steps than any render budget holds), shared by the
evidence, cost and certificate-evidence tests."""

from __future__ import annotations

import json


def write_long_episodes(path, n_items: int = 2, n_steps: int = 100) -> list[str]:
    """`n_items` coding-agent-like episodes of `n_steps` steps each (a user task, then alternating commands
    and long outputs, a final answer): far more than the server preset's render budget."""
    ids = []
    with open(path, "w", encoding="utf-8") as handle:
        for k in range(n_items):
            messages = [{"role": "user", "content": f"Fix the failing test in package {k}."}]
            for i in range(1, n_steps - 1):
                if i % 2:
                    messages.append({"role": "assistant", "content": f"Step {i}: run `pytest -x tests/t{i}.py`."})
                else:
                    messages.append({"role": "user", "content": f"output {i}\n" + f"line {i} of the log\n" * 150})
            messages.append({"role": "assistant", "content": "The test passes now."})
            record = {"id": f"long-{k}", "task_id": f"t{k}", "domain": "coding", "agent": "a",
                      "messages": messages, "reward": 1.0}
            handle.write(json.dumps(record) + "\n")
            ids.append(record["id"])
    return ids
