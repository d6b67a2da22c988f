"""Convert InterCode's NL2Bash multi-turn results (7 LLM agents on the same 200 tasks) to the generic JSONL.

    python evals/data/intercode_bash/convert.py /path/to/intercode/checkout-or-git-dir > out.jsonl

Origin: princeton-nlp/intercode (MIT), data/results/bash/<model>/ic_bash_multiturn_<model>_10_turns_fs_<k>.json at
commit c3e46d827cfc9d4c704ec078f7abf9f41e3191d8 (InterCode, Yang et al., NeurIPS 2023 Datasets and Benchmarks): at
most 10 turns; the four file systems fs_1..fs_4 hold 60 + 53 + 60 + 27 tasks, so a task is ``fs_<k>/<task_id>``.
The gpt-3.5 fs_2 file is not in the stored snapshot: those 53 tasks have 6 agents, the others 7.

What is kept: the query as the user message, each turn's bash action as a text action and its observation as the
environment's answer, marked ``is_error`` where InterCode's ``valid_action`` is false. An observation longer than
2,000 characters is cut there with a "[... N chars cut]" marker (a few runaway outputs; keeps the file small).
The label is ``summary.max_reward >= 1`` (InterCode's success); the per-turn evaluator rewards stay in
``metadata`` (hidden). Note: the harness ends an episode at the first turn with reward 1, so length is informative.
"""

from __future__ import annotations

import json
import subprocess
import sys

COMMIT = "c3e46d827cfc9d4c704ec078f7abf9f41e3191d8"
MODELS = ("gpt-4", "gpt-3.5", "text-davinci-003", "chat-bison-001", "text-bison-001", "starchat", "vicuna")
PATH = "data/results/bash/{model}/ic_bash_multiturn_{model}_10_turns_fs_{fs}.json"
CUT = 2000


def cut(text: str) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= CUT else text[:CUT] + f"\n[... {len(text) - CUT} chars cut]"


def main(repo: str) -> int:
    for trial, model in enumerate(MODELS):
        for fs in range(1, 5):
            path = PATH.format(model=model, fs=fs)
            shown = subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{path}"], capture_output=True, text=True)
            if shown.returncode:
                print(f"skipped {path}: {shown.stderr.strip()[:100]}", file=sys.stderr)
                continue
            for key, record in json.loads(shown.stdout).items():
                turns = record["turn_history"]
                messages = [{"role": "user", "content": record["query"]}]
                # a few records' parallel lists differ in length: the turns up to the shortest are kept
                steps = zip(turns["actions"], turns["observations"], turns["valid_action"], strict=False)
                for action, observation, valid in steps:
                    messages.append({"role": "assistant", "content": None, "action": str(action)})
                    messages.append({"role": "user", "observation": True, "content": cut(observation),
                                     **({"is_error": True} if not valid else {})})
                reward = float(record["summary"]["max_reward"])
                print(json.dumps({
                    "id": f"intercode-bash:{model}:fs_{fs}:{record['task_id']}",
                    "task_id": f"fs_{fs}/{record['task_id']}", "trial": trial, "domain": "nl2bash", "agent": model,
                    "messages": messages, "reward": reward, "label": int(reward >= 1),
                    "metadata": {"turn_rewards": turns["rewards"], "summary": record["summary"], "origin": path,
                                 "key": key}}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
