"""Where the cascade is shown: `certify CASCADE`, `report` of a cascade's verdict file (section and risk-coverage
figure), and `rubricforge demo`, whose report leads with the cascade (certified, or the refusal with the
labels needed: it never crashes and never invents a number)."""

from __future__ import annotations

import json

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.pipeline.demo_cascade import cascade_lead, fit_demo_cascade
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.report.judges import EMBEDDED_CAVEAT_TITLE
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.cascade import REWARD_ABOVE_0, save_cascade
from tests.support.report_rules import problems

UNSURE = {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}


def test_certify_a_cascade_reports_coverage_risks_and_calls_without_changing_it(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, None)
    before = cascade.read_bytes()
    verdicts = tmp_path / "held_out.jsonl"
    assert main(["certify", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--verdicts-out", str(verdicts)]) == 0
    out = capsys.readouterr().out
    assert "cascade on 250 item(s)" in out and "floor: decided" in out and "disagreement" in out
    assert "LM calls: 0 (no stage of the cascade makes LM calls)" in out and "saved" not in out
    assert "no certificate: hand-set thresholds" in out
    assert cascade.read_bytes() == before and len(verdicts.read_text().splitlines()) == 250
    assert main(["certify", str(cascade), "--data", str(halves / "cal.jsonl"), "--recheck"]) == 2


def test_report_of_a_cascade_verdict_file_has_the_section_and_the_figure(halves, tmp_path):
    cascade = save_cascade(halves, tmp_path, None)
    verdicts = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--out", str(verdicts)]) == 0
    lines = [json.loads(x) for x in verdicts.read_text().splitlines()]
    floor = [x for x in lines if x["stage"] == "floor"]
    wrong = sum(x["passed"] != bool(x["label"]) for x in floor)
    report = tmp_path / "report" / "report.md"
    assert main(["report", "--predictions", str(verdicts), "--out", str(report)]) == 0
    text = report.read_text()
    assert "## Cascade: decided per stage, escalated to a person" in text
    assert f"| floor | {len(floor)} |" in text and f"{wrong / len(floor):.3f} [" in text
    assert "LM requests: 0 (no stage of this cascade makes LM calls)" in text and "saved" not in text
    assert (report.parent / "figures" / "risk_coverage.png").stat().st_size > 1000
    numbers = json.loads(report.with_suffix(".json").read_text())["cascade"]
    assert numbers["escalated"] == sum(x["stage"] == "escalated" for x in lines) and numbers["lm_calls"] == 0


def test_the_demo_cascade_certifies_the_floor_where_it_can_and_says_what_reached_the_llm(halves, tmp_path):
    sample = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0)) + \
        list(load_trajectories(halves / "train.jsonl", label_threshold=0.0))
    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program)
    lm = ScriptedLM(lambda messages: UNSURE)  # an LLM stage that is never sure: it decides nothing
    result = fit_demo_cascade(sample, (0.45, 0.05, 0.5), 0, program, lm, tmp_path)
    if not result["certified"]:
        # the per-stage default at the demo's alpha 0.1: 90% of this set passes, the floor is sure of too few
        # failures (16 of 250, 22 needed) and passing bounds its false passes; the refusal says where it stopped
        reason = result["reason"]
        assert "the sequence stopped at its first vector not certified" in reason
        asked = int(reason.split("needs about ")[1].split()[0])
        assert asked > 250 and not (tmp_path / "cascade.json").exists()
        assert (tmp_path / "cascade_fit.json").is_file()
        return
    assert result["free"] > 0 and result["llm_decided"] == 0
    assert result["free"] + result["llm_decided"] + result["to_person"] == result["n"]
    # the never-sure judge is dropped by the fit: the cascade makes no LM call, so none is claimed saved
    assert [row["name"] for row in result["dropped"]] == ["judge"] and result["to_llm"] == 0
    assert result["lm_calls_saved"] is None
    lead = "\n".join(cascade_lead(result, embedded=True))
    assert f"**decided for free** by the symptom floor (no LM call): {result['free']} of {result['n']}" in lead
    assert "**dropped by the fit**: judge" in lead and "saved" not in lead and "sent to the LLM" not in lead
    assert (tmp_path / "cascade.json").is_file() and (tmp_path / "cascade_fit.json").is_file()


def test_demo_report_leads_with_the_cascade_or_its_refusal(tmp_path, monkeypatch, capsys, scripted_cli):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = tmp_path / "demo-out"
    assert main(["demo", "--out", str(out), "--tasks", "20", "--budget", "40", "--preset", "embedded"]) == 0
    report = (out / "report.md").read_text().split("\n")
    sections = [line for line in report if line.startswith("## ")]
    # what the embedded model can and cannot tell opens the report (issue 41 item 7), then the cascade
    assert sections[:2] == [EMBEDDED_CAVEAT_TITLE, "## Trust or escalate: what a certified cascade would do here"]
    assert json.loads((out / "run.json").read_text())["embedded"] is True  # the demo says whose verdicts these are
    assert problems("\n".join(report), embedded=True) == []  # every judge row defined before its first table
    fit = json.loads((out / "cascade_fit.json").read_text())
    text = "\n".join(report)
    if fit["certified"]:
        assert "**decided for free**" in text and "**escalated to a person**" in text
    else:  # the demo's few test tasks: the refusal, with the labels it would need, never a made-up rate
        assert "**Nothing certified.**" in text and "cascade fit refused" in text
        assert fit["needed_decided"] is None or f"about {fit.get('needed_labels') or fit['needed_decided']}" in text
    assert "135M" in text
    printed = capsys.readouterr().out
    assert ("Nothing certified" in printed) != fit["certified"]  # the command says it too
