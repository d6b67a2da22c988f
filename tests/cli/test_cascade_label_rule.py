"""A cascade remembers the label rule it was calibrated with (issue #35): `cascade fit` records it in the
guarantee, and `judge --cascade`, `certify` of a cascade and `report` of a cascade's verdicts read labels by it
(no --label-threshold: the cascade's, said in one line; another one: exit 2 naming both rules). And
`report --label-threshold` without --labels labels verdict lines again from their rewards (lines without a reward:
exit 2)."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.loading import load_judge
from tests.support.cascade import REWARD_ABOVE_0, lines_of


@pytest.fixture(scope="module")
def fitted(halves, tmp_path_factory):
    """A floor-only cascade fit on the calibration half with labels by reward > 0 (the webshop default is
    reward >= 1: the two rules label the shipped set differently)."""
    out = tmp_path_factory.mktemp("fit") / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(halves / "cal.jsonl"),
                 "--order-data", str(halves / "train.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.2", "--delta", "0.1",
                 "--out", str(out)]) == 0
    return out


def _labels(path, rule):
    return {t.id: t.label for t in load_trajectories(path, label_threshold=rule)}


def test_the_fit_records_its_label_rule(fitted, halves, capsys):
    rule = load_judge(fitted).guarantee["label_rule"]
    assert rule == {"rules": ["reward > 0"], "source": "given", "labels": None}
    assert main(["show", str(fitted)]) == 0
    assert "labels: reward > 0 (given)" in capsys.readouterr().out
    above0, full = _labels(halves / "cal.jsonl", 0.0), _labels(halves / "cal.jsonl", None)
    assert above0 != full  # the rules disagree on this data: the test can tell them apart


def test_judge_cascade_reads_labels_by_the_cascades_rule(fitted, halves, tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(fitted), "--data", str(halves / "cal.jsonl"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "labels: reward > 0, the rule the cascade" in err
    assert {x["id"]: x["label"] for x in lines_of(out)} == _labels(halves / "cal.jsonl", 0.0)


def test_judge_cascade_with_another_rule_is_exit_2_naming_both(fitted, halves, tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    code = main(["judge", "--cascade", str(fitted), "--data", str(halves / "cal.jsonl"), "--label-threshold", ">=1",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "reward >= 1" in err and "reward > 0" in err and "Traceback" not in err
    assert not out.exists()


def test_certify_of_a_cascade_uses_its_rule_and_refuses_another(fitted, halves, capsys):
    assert main(["certify", str(fitted), "--data", str(halves / "cal.jsonl")]) == 0
    default = capsys.readouterr()
    assert "labels: reward > 0, the rule the cascade" in default.err
    assert main(["certify", str(fitted), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0]) == 0
    assert capsys.readouterr().out == default.out  # the same numbers as with the rule given
    assert main(["certify", str(fitted), "--data", str(halves / "cal.jsonl"), "--label-threshold", ">=1"]) == 2
    err = capsys.readouterr().err
    assert "reward >= 1" in err and "reward > 0" in err


def test_report_of_a_cascade_run_reads_a_label_file_by_the_cascades_rule(fitted, halves, tmp_path, capsys):
    verdicts = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(fitted), "--data", str(halves / "cal.jsonl"), "--out", str(verdicts)]) == 0
    rewards = {t.id: t.reward for t in load_trajectories(halves / "cal.jsonl")}
    labels = tmp_path / "rewards.csv"
    labels.write_text("id,reward\n" + "".join(f"{i},{r}\n" for i, r in rewards.items()))
    capsys.readouterr()
    report = tmp_path / "r" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--labels", str(labels), "--out", str(report)]) == 0
    assert "labels: reward > 0, the rule the cascade that judged" in capsys.readouterr().err
    numbers = json.loads(report.with_suffix(".json").read_text())
    assert any("reward > 0" in w for w in numbers["warnings"])
    assert main(["report", "--predictions", str(verdicts), "--labels", str(labels), "--label-threshold", ">=1",
                 "--out", str(report)]) == 2
    err = capsys.readouterr().err
    assert "reward >= 1" in err and "reward > 0" in err


def _verdict_lines(path, with_reward: bool):
    lines = []
    for k in range(40):
        reward = [0.0, 0.4, 1.0, 0.7][k % 4]
        line = {"id": f"t{k}", "task_id": f"task{k}", "passed": reward > 0.5, "score": reward, "abstained": False,
                "label": int(reward > 0)}
        if with_reward:
            line["reward"] = reward
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n")


def test_report_label_threshold_relabels_verdict_lines_from_their_rewards(tmp_path, capsys):
    verdicts = tmp_path / "judge.jsonl"
    _verdict_lines(verdicts, with_reward=True)
    plain, strict = tmp_path / "plain" / "report.md", tmp_path / "strict" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--out", str(plain)]) == 0
    assert main(["report", "--predictions", str(verdicts), "--label-threshold", ">=1", "--out", str(strict)]) == 0
    base_rate = [json.loads(p.with_suffix(".json").read_text())["items"] for p in (plain, strict)]
    assert base_rate[0] != base_rate[1]
    assert base_rate[0]["n_passed"] == 30 and base_rate[1]["n_passed"] == 10  # reward > 0, then reward >= 1


def test_report_label_threshold_without_rewards_or_labels_is_exit_2(tmp_path, capsys):
    verdicts = tmp_path / "judge.jsonl"
    _verdict_lines(verdicts, with_reward=False)
    code = main(["report", "--predictions", str(verdicts), "--label-threshold", "0.5", "--out",
                 str(tmp_path / "r" / "report.md")])
    err = capsys.readouterr().err
    assert code == 2 and "--label-threshold" in err and "--labels" in err and "reward" in err
