"""examples/walkthrough.py runs offline with the scripted LMs and does what it says, end to end."""

from __future__ import annotations

import json
import runpy

from tests.helpers import REPO


def test_the_walkthrough_runs_with_scripted_lms(tmp_path, capsys):
    walkthrough = runpy.run_path(str(REPO / "examples" / "walkthrough.py"))
    assert walkthrough["main"](["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "walkthrough.json").read_text())
    assert summary["simulated"] is True and summary["judge_lm"] == "scripted-judge"
    assert summary["train"] + summary["test"] == 32
    # the compiled judge beats the seed on held-out tasks, measured by dspy.Evaluate
    assert summary["evaluate"] == {"seed": 50.0, "compiled": 100.0}
    assert "dspy.Evaluate agreement on 12 test examples: seed 50.0%, compiled 100.0%" in printed
    assert summary["best_index"] == 1 and summary["certificate_false_pass"]["k"] == 0
    assert (tmp_path / "judge.json").exists()
    # the reloaded judge as a GEPA metric fails the run whose booking errored, naming the criterion
    assert summary["gepa_metric"]["score"] == 0.0 and "7. Tool errors" in summary["gepa_metric"]["feedback"]
    # ... and as a TRL reward: the successful rollout above the failed one, nothing abstained
    good, bad = summary["trl_rewards"]
    assert good > 0.5 > bad and summary["reward_counters"] == {"judged": 2, "abstained": 0}
