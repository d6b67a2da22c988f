"""Labeled agent sets with the recorded verdicts of a real LLM judge, for the cascade benchmark (issue 39 item 7).

    from evals.real_judges import load_real_judge_sets

    for name, data in load_real_judge_sets().items():
        data.trajectories          # list[Trajectory], label = the human label (hidden from any judge)
        data.task_ids              # one per trajectory, in order: group splits by these
        data.verdicts              # {judge name: Path of its verdict-line JSONL}
        # e.g. a recorded stage: rubricforge cascade fit --stage <data.verdicts[judge]> ...
        # or in Python: rubricforge_dspy.judge.recorded.RecordedJudge.from_file(data.verdicts[judge])

Each set is a folder under ``evals/data/`` shipped with the repository (sources, licenses and every dropped item:
``evals/data/SOURCES.md``, ``LICENSES.md``). Verdict files are verdict lines (``core/verdict.py``'s
``verdict_line``: ``id``, ``passed``, ``score``...) written from the judge's own recorded output; the judge's
``passed`` is kept as given. ``load_real_judge_sets`` checks that every trajectory has exactly one verdict line
in each file and the reverse, and raises ``InputError`` naming the file otherwise.

Sets:

* ``devai``: DevAI (Zhuge et al. 2024, metauto-ai/agent-as-a-judge, MIT): 1,097 requirement-level items on 55
  tasks, three developer agents per task (GPT-Pilot, MetaGPT, OpenHands). Label: the human evaluation's
  ``satisfied``. Judge ``agent_as_a_judge_gray_box``: Agent-as-a-Judge's recorded ``satisfied`` (a GPT-4o-based
  agent judge that read each agent's workspace and trajectory; no score recorded, so score = 1.0 pass / 0.0
  fail). What a RubricForge judge can read of an item is the task's query and the requirement only: the agents'
  workspaces are not in the origin repository, so only the recorded judge sees the work. Group splits by
  ``task_ids`` (55 tasks: calibration sizes of 20 and 40 tasks at most), never by (agent, task): the three agents'
  items of one requirement have the same observable text, so a finer unit puts the same text on both sides.

The judge alone's agreement with the labels on each whole set: ``python -m evals.real_judges --out
evals/results/real_judges.json`` (no LM call).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import read_verdicts
from rubricforge_dspy.data.formats import load_trajectories

DATA = Path(__file__).resolve().parent / "data"
# set name -> (trajectory file, {judge name: verdict file}), relative to evals/data/
SETS: dict[str, tuple[str, dict[str, str]]] = {
    "devai": ("devai/devai_requirements.jsonl",
              {"agent_as_a_judge_gray_box": "devai/verdicts/agent_as_a_judge_gray_box.jsonl"}),
}


@dataclass(frozen=True)
class RealJudgeSet:
    """One labeled set: its trajectories (labels hidden from judges), their task ids, the recorded verdict files."""

    name: str
    trajectories: list[Trajectory]
    verdicts: dict[str, Path]
    data_path: Path
    task_ids: list[str] = field(default_factory=list)


def load_real_judge_set(name: str, root: Path = DATA) -> RealJudgeSet:
    """The set `name` (a key of `SETS`) read from `root`; ids must join 1:1 with every verdict file."""
    if name not in SETS:
        raise InputError(f"unknown real-judge set {name!r}; known: {', '.join(sorted(SETS))}")
    data_file, judges = SETS[name]
    data_path = root / data_file
    trajectories = list(load_trajectories(data_path))
    ids = [t.id for t in trajectories]
    if any(t.label not in (0, 1) for t in trajectories):
        raise InputError(f"{data_path}: every trajectory must carry a 0/1 label")
    verdicts = {}
    for judge, verdict_file in judges.items():
        path = root / verdict_file
        lines = set(read_verdicts(path))  # raises VerdictLineError (exit 2) on a repeated id or a bad line
        if len(ids) != len(set(ids)) or lines != set(ids):
            raise InputError(f"{path}: verdict ids do not join 1:1 with {data_path} "
                             f"({len(set(ids) - lines)} trajectories without a line, "
                             f"{len(lines - set(ids))} lines without a trajectory)")
        verdicts[judge] = path
    return RealJudgeSet(name=name, trajectories=trajectories, verdicts=verdicts, data_path=data_path,
                        task_ids=[str(t.task_id) for t in trajectories])


def load_real_judge_sets(root: Path = DATA) -> dict[str, RealJudgeSet]:
    """Every set of `SETS`, by name."""
    return {name: load_real_judge_set(name, root) for name in SETS}


def judge_alone(data: RealJudgeSet, judge: str) -> dict:
    """The recorded judge's agreement with the labels on the whole set (the project's metrics)."""
    from rubricforge_dspy.metrics.intervals import proportion_ci as clopper_pearson

    labels = {t.id: int(t.label) for t in data.trajectories}
    lines = read_verdicts(data.verdicts[judge])
    decided = [i for i in labels if not lines[i]["abstained"] and not lines[i].get("contradiction")]
    wrong = sum(bool(lines[i]["passed"]) != bool(labels[i]) for i in decided)
    failed = [i for i in decided if labels[i] == 0]
    false_pass = sum(bool(lines[i]["passed"]) for i in failed)
    passed = [i for i in decided if lines[i]["passed"]]
    return {"set": data.name, "judge": judge, "model": next(iter(lines.values())).get("model"),
            "n": len(labels), "tasks": len(set(data.task_ids)), "decided": len(decided),
            "abstained_or_contradictory": len(labels) - len(decided),
            "label_positives": sum(labels.values()),
            "disagreement": {"k": wrong, "n": len(decided), "rate": wrong / len(decided),
                             "ci95_exact": list(clopper_pearson(wrong, len(decided)))},
            "false_pass_rate": {"k": false_pass, "n": len(failed), "rate": false_pass / len(failed),
                                "ci95_exact": list(clopper_pearson(false_pass, len(failed))),
                                "definition": "judge passed / items the label fails"},
            "failed_share_of_passes": {"k": false_pass, "n": len(passed), "rate": false_pass / len(passed),
                                       "ci95_exact": list(clopper_pearson(false_pass, len(passed)))}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here (default: stdout)")
    args = parser.parse_args(argv)
    rows = [judge_alone(data, judge) for data in load_real_judge_sets().values() for judge in data.verdicts]
    text = json.dumps({"lm_calls": 0, "machine": "2-core VM", "results": rows}, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
