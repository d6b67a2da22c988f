"""The report of a cascade's verdict file (issue #34): its title names the cascade and the data, it shows the
certified alpha, delta and method, it claims no LM calls saved for a cascade of floors, and an escalated item is
neither a pass nor a fail: not in the metrics, the confusion counts or the figures' data."""

from __future__ import annotations

import json

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from tests.support.cascade import REWARD_ABOVE_0, lines_of

GUARANTEE = {"alpha": 0.15, "delta": 0.05, "max_false_pass": None, "method": "split_fixed_sequence",
             "p_values": "betting"}


def test_the_report_titles_the_run_shows_the_certificate_and_never_counts_an_escalation_as_a_fail(halves, tmp_path):
    floor = FloorJudge(SymptomFloor.from_json((halves / "floor.json").read_text()))
    cascade = tmp_path / "fitted.json"
    Cascade([floor], [StageRule("floor", 0.95, 0.05)], guarantee=GUARANTEE).save(cascade)
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "120", "--out", str(out)]) == 0
    lines = lines_of(out)
    decided = [x for x in lines if x["stage"] != "escalated"]
    escalated = [x for x in lines if x["stage"] == "escalated"]
    assert decided and escalated and any(x["label"] == 1 for x in escalated)

    report = tmp_path / "r" / "report.md"
    assert main(["report", "--predictions", str(out), "--out", str(report)]) == 0
    text = report.read_text()
    assert text.startswith("# Judge report: cascade `fitted.json` on `cal.jsonl`")
    assert "alpha 0.15, delta 0.05, method split_fixed_sequence, betting p-values" in text
    assert "LM requests: 0 (no stage of this cascade makes LM calls)" in text and "saved" not in text
    numbers = json.loads(report.with_suffix(".json").read_text())
    assert numbers["cascade"]["guarantee"]["alpha"] == 0.15 and numbers["cascade"]["lm_calls_saved"] is None
    assert numbers["items"]["n"] == len(decided) and numbers["items"]["escalated_left_out"] == len(escalated)
    row = numbers["main"][0]
    false_fails = sum(not x["passed"] and x["label"] == 1 for x in decided)
    assert row["n"] == len(decided) and row["tp"] + row["fp"] + row["tn"] + row["fn"] == len(decided)
    assert row["fn"] == false_fails and row["abstained"] == 0
    assert sum(numbers["calibration"]["rows"][0]["reliability"]["count"]) == len(decided)  # the figure's data
    assert any("escalated to a person by the cascade" in w for w in numbers["warnings"])
