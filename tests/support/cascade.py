"""What the cascade's command-line tests share: the shipped webshop set split by task, a hand-set cascade saved
beside a fitted floor, and reading verdict lines."""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.scripted import last_user_text
from tests.support.helpers import REPO

WEBSHOP = REPO / "evals" / "data" / "react_webshop" / "react_webshop_davinci002_500.jsonl"
REWARD_ABOVE_0 = ["--label-threshold", "0"]  # the labeling the benchmark's floor kappa 0.75 is measured on


def split_webshop(root: Path) -> Path:
    """The shipped webshop set split by task (one trial per task) into ``train.jsonl`` and ``cal.jsonl``, and a
    floor fit on the training half (``floor.json``): the cascade is calibrated and run on the other half
    (assumption 3: the stages are not fit on the calibration data)."""
    lines = WEBSHOP.read_text().splitlines()
    (root / "train.jsonl").write_text("\n".join(lines[0::2]) + "\n")
    (root / "cal.jsonl").write_text("\n".join(lines[1::2]) + "\n")
    train = load_trajectories(root / "train.jsonl", label_threshold=0.0)
    (root / "floor.json").write_text(SymptomFloor.fit(list(train)).to_json())
    return root


def lines_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def save_cascade(halves: Path, tmp_path: Path, judge_rule: StageRule | None) -> Path:
    """A floor (fail below 0.05, pass above 0.95), then (optionally) the seed LLM judge, saved as
    ``tmp_path/cascade.json``."""
    floor = FloorJudge(SymptomFloor.from_json((halves / "floor.json").read_text()))
    stages, rules = [floor], [StageRule("floor", 0.95, 0.05)]
    if judge_rule is not None:
        stages.append(TrajectoryJudge())
        rules.append(judge_rule)
    path = tmp_path / "cascade.json"
    Cascade(stages, rules).save(path)
    return path


UNSURE = "(unsure)"


def judge_answers(messages):
    """Reads wrong dates (fails them), is unsure of episodes marked UNSURE, passes the rest; blind to tool errors."""
    text = last_user_text(messages)
    if "wrong date" in text:
        return {"reason": "The agent booked the wrong date.", "passed": False, "score": 0.1}
    if UNSURE in text or "maybe" in text:
        return {"reason": "Cannot tell.", "passed": True, "score": 0.5}
    return {"reason": "The agent says the flight is booked.", "passed": True, "score": 0.9}
