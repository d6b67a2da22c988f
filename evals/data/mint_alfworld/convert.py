"""Convert MINT's ALFWorld outputs (several LLM agents on the same 134 tasks) to the generic JSONL.

    python evals/data/mint_alfworld/convert.py /path/to/mint-bench/checkout-or-git-dir > out.jsonl

Origin: xingyaoww/mint-bench (Apache-2.0), data/outputs/<model>/F=None/max5_p2+tool+cd/decision_making/alfworld/
results.jsonl at commit 3f7f12c10bf763be1e6dbdeb42feb57624121f61 (MINT, Wang et al., ICLR 2024): each agent gets
at most 5 turns and 2 solution proposals, no language feedback. One line per (model, task).

What is kept: the task text (``task.prompt``, without MINT's in-context example, which is the same for every
task), each assistant turn (its ``<execute>`` block as a text action, the rest as the thought) and each
"Observation:" turn as the environment's answer (``observation: true``); every string verbatim. The label is
the harness's own ``state.success`` (``terminate_reason == 'task_success'``); the terminate reason, the task type
and the gold reference stay in ``metadata`` (hidden). Nothing else is changed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

COMMIT = "3f7f12c10bf763be1e6dbdeb42feb57624121f61"
# six agents of varied success (113, 112, 86, 63, 56 and 50 of 134 tasks solved)
MODELS = ("gpt-4-0613", "Meta-Llama-3-70B-Instruct", "Mixtral-8x7B-Instruct-v0.1", "claude-instant-1",
          "gpt-3.5-turbo-0613", "CodeLlama-34b-Instruct-hf")
PATH = "data/outputs/{model}/F=None/max5_p2+tool+cd/decision_making/alfworld/results.jsonl"
EXECUTE = re.compile(r"<execute>(.*?)(?:</execute>|$)", re.S)


def messages(record: dict) -> list[dict]:
    out = [{"role": "user", "content": record["task"]["prompt"]}]
    history = record["state"]["history"][1:]  # [0] is the in-context example followed by the same task text
    acted = False
    for turn in history:
        text = turn["content"]
        if turn["role"] == "assistant":
            match = EXECUTE.search(text)
            if match:
                thought = (text[: match.start()] + text[match.end():]).strip()
                out.append({"role": "assistant", "content": thought or None, "action": match.group(1).strip()})
                acted = True
            else:
                out.append({"role": "assistant", "content": text})
        elif acted and text.startswith("Observation:"):
            out.append({"role": "user", "observation": True, "content": text})
            acted = False
        else:
            out.append({"role": "user", "content": text})
    return out


def main(repo: str) -> int:
    for trial, model in enumerate(MODELS):
        raw = subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{PATH.format(model=model)}"], check=True,
                             capture_output=True, text=True).stdout
        for line in raw.splitlines():
            record = json.loads(line)
            task, state = record["task"], record["state"]
            success = bool(state["success"])
            print(json.dumps({
                "id": f"mint-alfworld:{model}:{task['task_id']}", "task_id": str(task["task_id"]), "trial": trial,
                "domain": "alfworld", "agent": model, "messages": messages(record),
                "reward": 1.0 if success else 0.0, "label": int(success),
                "metadata": {"terminate_reason": state["terminate_reason"],
                             "task_type": task["metadata"].get("task_type"), "reference": task.get("reference"),
                             "origin": PATH.format(model=model)}},
                ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
