"""Convert DevAI's judgments (human labels and Agent-as-a-Judge's recorded verdicts) to the generic JSONL and a
verdict-line JSONL.

    python evals/data/devai/convert.py /path/to/agent-as-a-judge/git-dir evals/data/devai

Origin: metauto-ai/agent-as-a-judge (MIT), commit 43c2fa7b84ef0c1522e8250576e6798bace29dd0 (Zhuge et al., "Agent-as-
a-Judge: Evaluate Agents with Agents", arXiv 2410.10934, ICML 2025). DevAI has 55 AI-development tasks, each a user
query with hierarchical requirements; three developer agents (GPT-Pilot, MetaGPT, OpenHands) ran every task. For
each agent and task the repository holds two judgment files with the same requirements:

* ``benchmark/judgment/<agent>/human_as_a_judge/<task>.json``: ``satisfied`` per requirement, the human
  evaluation (the label here);
* ``benchmark/judgment/<agent>/agent_as_a_judge/gray_box/<task>.json``: ``satisfied`` per requirement as the
  Agent-as-a-Judge (gray-box setting: it read the agent's workspace and trajectory) recorded it (the verdict).

One item per (agent, task, requirement). Its observable text is the task's user query and the requirement
(its id, category, prerequisites and criteria); the agents' workspaces and trajectories are **not** in the
repository (one OpenHands trajectory is), so a judge that reads only this text sees the request, not the work.
The label is the human ``satisfied``; the item's ``task_id`` is the DevAI task name, its ``agent`` the developer
agent. The verdict line keeps the judge's ``satisfied`` as ``passed``; the judge gave no score, so ``score`` is
1.0 for a pass and 0.0 for a fail (a pass/fail tool). Items whose two files disagree on the requirement ids or
whose ``satisfied`` is not a boolean are dropped and counted on stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMMIT = "43c2fa7b84ef0c1522e8250576e6798bace29dd0"
AGENTS = ("GPT-Pilot", "MetaGPT", "OpenHands")
HUMAN = "benchmark/judgment/{agent}/human_as_a_judge/{task}.json"
JUDGE = "benchmark/judgment/{agent}/agent_as_a_judge/gray_box/{task}.json"
JUDGE_NAME = "agent_as_a_judge_gray_box"
JUDGE_MODEL = "gpt-4o (Agent-as-a-Judge, gray-box; snapshot not recorded in the judgment files)"
TRAJECTORIES = "devai_requirements.jsonl"


def git_show(repo: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def tasks(repo: str) -> list[str]:
    listed = subprocess.run(["git", "-C", repo, "ls-tree", "--name-only", COMMIT, "benchmark/devai/instances/"],
                            capture_output=True, text=True, check=True).stdout.split()
    return sorted(Path(name).stem for name in listed if name.endswith(".json"))


def requirement_text(requirement: dict) -> str:
    prerequisites = ", ".join(f"R{p}" for p in requirement.get("prerequisites") or []) or "none"
    return (f"Requirement R{requirement['requirement_id']} ({requirement.get('category') or 'no category'}; "
            f"depends on: {prerequisites}): {requirement['criteria']}")


def records(repo: str, dropped: dict[str, int]) -> tuple[list[dict], dict[str, bool]]:
    """The trajectory records and each id's recorded judge verdict."""
    out, verdicts = [], {}
    for agent in AGENTS:
        for task in tasks(repo):
            human = json.loads(git_show(repo, HUMAN.format(agent=agent, task=task)))
            judge = json.loads(git_show(repo, JUDGE.format(agent=agent, task=task)))
            judged = {r["requirement_id"]: r for r in judge["requirements"]}
            for requirement in human["requirements"]:
                rid = requirement["requirement_id"]
                other = judged.get(rid)
                if other is None or other["criteria"] != requirement["criteria"]:
                    dropped["no matching judge requirement"] += 1
                    continue
                if not isinstance(requirement.get("satisfied"), bool) or not isinstance(other.get("satisfied"), bool):
                    dropped["satisfied not a boolean"] += 1
                    continue
                item_id = f"devai/{agent}/{task}/R{rid}"
                label = int(requirement["satisfied"])
                out.append({
                    "id": item_id, "task_id": task, "domain": "devai", "agent": agent,
                    "messages": [{"role": "user", "content": human["query"]},
                                 {"role": "user", "content": requirement_text(requirement)}],
                    "reward": float(label), "label": label,
                    "metadata": {"origin": f"metauto-ai/agent-as-a-judge@{COMMIT}",
                                 "human_file": HUMAN.format(agent=agent, task=task), "requirement_id": rid,
                                 "tags": human.get("tags", [])},
                })
                verdicts[item_id] = bool(other["satisfied"])
            extra = set(judged) - {r["requirement_id"] for r in human["requirements"]}
            dropped["judge requirement with no human label"] += len(extra)
    return out, verdicts


def main(repo: str, out_dir: str) -> int:
    from rubricforge_dspy.core.verdict import Verdict, verdict_line
    from rubricforge_dspy.data.formats import load_trajectories

    dropped = {"no matching judge requirement": 0, "satisfied not a boolean": 0,
               "judge requirement with no human label": 0}
    rows, verdicts = records(repo, dropped)
    folder = Path(out_dir)
    (folder / "verdicts").mkdir(parents=True, exist_ok=True)
    path = folder / TRAJECTORIES
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    loaded = load_trajectories(path)
    if len(loaded) != len(rows):
        raise SystemExit(f"{path}: {len(rows)} written, {len(loaded)} loaded")
    lines = []
    for trajectory in loaded:
        passed = verdicts[trajectory.id]
        verdict = Verdict(passed=passed, score=1.0 if passed else 0.0,
                          reason=f"Agent-as-a-Judge (gray-box) recorded satisfied={str(passed).lower()}")
        lines.append(json.dumps(verdict_line(trajectory, verdict, model=JUDGE_MODEL), ensure_ascii=False) + "\n")
    (folder / "verdicts" / f"{JUDGE_NAME}.jsonl").write_text("".join(lines), encoding="utf-8")
    print(f"{len(rows)} items ({len({r['task_id'] for r in rows})} tasks x {len(AGENTS)} agents); dropped: {dropped}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
