"""The shipped mapping samples (evals/data/mapped/) and what a correct load of each gives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MAPPED = Path(__file__).resolve().parents[2] / "evals" / "data" / "mapped"


@dataclass(frozen=True)
class Sample:
    name: str
    mapping: Path
    data: Path
    ids: tuple  # ids of the loaded trajectories, in order
    task_ids: tuple
    labels: tuple
    skipped: int = 0
    secrets: tuple = ()  # text only in non-observable fields: must never reach the render


SAMPLES = {
    "intercode_bash": Sample(
        "intercode_bash", MAPPED / "intercode_bash" / "mapping.json",
        MAPPED / "intercode_bash" / "ic_bash_multiturn_gpt-4_10_turns_fs_1.sample.json",
        ids=tuple(f"ic_bash_multiturn_gpt-4_10_turns_fs_1.sample:{k}" for k in ("0", "2", "3", "5")),
        task_ids=("0", "2", "3", "5"), labels=(1, 1, 0, 1),
        secrets=("nl2bash_fs_1.json", "max_reward")),
    "intercode_sql": Sample(
        "intercode_sql", MAPPED / "intercode_sql" / "mapping.yaml",
        MAPPED / "intercode_sql" / "ic_sql_multiturn_gpt-4_10_turns.sample.json",
        ids=("ic_sql:0", "ic_sql:1", "ic_sql:802", "ic_sql:524"), task_ids=("0", "1", "802", "524"),
        labels=(1, 1, 0, 0), secrets=("dev_spider.json",)),
    "reflexion_humaneval": Sample(
        "reflexion_humaneval", MAPPED / "reflexion_humaneval" / "mapping.json",
        MAPPED / "reflexion_humaneval" / "reflexion_10_gpt-4_pass_at_k_1.sample.jsonl",
        ids=("HumanEval/0", "HumanEval/1", "HumanEval/2"), task_ids=("HumanEval/0", "HumanEval/1", "HumanEval/2"),
        labels=(1, 0, 1),
        # gold solutions and the hidden tests
        secrets=("distance = abs(elem - elem2)", "current_string.clear()", "return number % 1.0",
                 "def check(candidate)", "is_solved")),
    "toolbench": Sample(
        "toolbench", MAPPED / "toolbench" / "mapping.json", MAPPED / "toolbench" / "answer",
        ids=("G1_answer/10_ChatGPT_DFS_woFilter_w2", "G2_answer/127_ChatGPT_DFS_woFilter_w2"),
        task_ids=("Can you retrieve the contact details of the 'Gondrand' customs agency in New Caledonia? I'm "
                  "particularly interested in their postal code, email, name, and phone number. Also, please provide "
                  "a list of all available transitaires.",
                  "I'm organizing a charity auction and I need to track the delivery of the donated items. "
                  "Can you give me the tracking details for the package I sent using Pack & Send? "
                  "The reference number is YZA890. "
                  "Additionally, I need to check the status of the package I sent through Pridnestrovie Post. The "
                  "tracking number is RB413450335SG."),
        labels=(1, 0), skipped=1, secrets=("finish_type", "query_count")),
    "mint": Sample(
        "mint", MAPPED / "mint_gsm8k" / "mapping.yaml", MAPPED / "mint_gsm8k" / "results.sample.jsonl",
        ids=("reasoning:0", "reasoning:1", "reasoning:4"), task_ids=("0", "1", "4"), labels=(0, 0, 1),
        secrets=("terminate_reason", "max_propose_steps", "task_success", "token_counter")),
}
