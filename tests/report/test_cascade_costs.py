"""Costs as a user pays them (issue 39, item 5): a recorded stage's verdicts are what a user pays another tool
for, so they count as judge verdicts wherever calls are counted (`judge --cascade`'s summary, `report` of its
verdicts, `certify` of the cascade), in the same words ("judge verdicts needed: K of N (P% saved)"), and no summary
of such a cascade says its cost is "LM calls: 0"; the LM calls stay for what this process asks of an LM."""

from __future__ import annotations

import json

import dspy

from rubricforge_dspy.apply.cascade_job import gives_judge_verdicts
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.recorded import CallableJudge, RecordedJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from rubricforge_dspy.testing.scripted import ScriptedLM
from rubricforge_dspy.trust.cascade import cascade_summary, format_cascade_summary
from tests.support.cascade import REWARD_ABOVE_0, judge_answers, lines_of
from tests.support.recorded import no_tool_error_passes, other_tool_verdicts


def _needed(k: int, n: int) -> str:
    return f"judge verdicts needed: {k} of {n} ({(n - k) / n:.0%} saved)"


def test_a_recorded_stage_costs_judge_verdicts_in_judge_report_and_certify(halves, tmp_path, capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    cascade = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", str(verdicts),
                 "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.05",
                 "--bound", "pooled", "--method", "split_fixed_sequence",  # costs are tested, not power
                 "--out", str(cascade)]) == 0
    capsys.readouterr()

    judged = tmp_path / "v.jsonl"
    with FakeOpenAI() as fake:
        assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--out", str(judged), "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        assert fake.n_requests == 0  # nothing was asked of an LM...
    lines = lines_of(judged)
    # ...but every item past the floor needed the other tool's verdict (decided by it, or escalated after it)
    reached = sum(x["stage"] != "floor" for x in lines)
    assert 0 < reached < len(lines) == 250
    err = capsys.readouterr().err
    assert _needed(reached, 250) in err
    assert "LM calls: 0" not in err and "LM calls: none made by this run" in err

    report = tmp_path / "report" / "report.md"
    assert main(["report", "--predictions", str(judged), "--out", str(report)]) == 0
    text = report.read_text()
    assert _needed(reached, 250).capitalize() in text and "LM requests: 0" not in text
    section = json.loads(report.with_suffix(".json").read_text())["cascade"]
    assert section["judge_verdicts"] == reached and section["judge_stages"] == ["recorded"]
    assert section["lm_calls"] == 0  # LM requests stay what this process sent to an LM

    capsys.readouterr()
    assert main(["certify", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0]) == 0
    out = capsys.readouterr().out
    assert _needed(reached, 250) in out and "LM calls: 0" not in out and "LM tokens: 0" not in out
    assert "recorded: decided" in out and "judge verdict(s), recorded or computed: no LM call" in out


def test_cascade_summary_counts_recorded_python_and_llm_stages_as_judge_verdicts(halves):
    data = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))[:60]
    labels = [t.label for t in data]
    floor = load_judge(halves / "floor.json")
    answers = {t.id: Verdict.from_answer(bool(t.label), float(t.label), "other tool") for t in data[::2]}
    recorded = RecordedJudge(answers, "other tool")  # half the ids have a line: the others are handed on
    python = CallableJudge(no_tool_error_passes)
    rules = [StageRule("floor", 0.9, 0.1), StageRule("recorded", 0.6, 0.4), StageRule("python", 0.6, 0.4)]
    cascade = Cascade([floor, recorded, python], rules)
    verdicts = cascade.batch(data)
    summary = cascade_summary(cascade, verdicts, labels)
    calls = verdicts.stage_calls
    assert summary["judge_stages"] == ["recorded", "python"]
    assert summary["judge_verdicts"] == calls.get("recorded", 0) + calls.get("python", 0) > 0
    assert summary["lm_calls"] == 0 and summary["lm_calls_saved"] is None
    text = format_cascade_summary(summary)
    assert _needed(summary["judge_verdicts"], 60) in text
    assert "LM calls: 0" not in text and "LM calls: none made by this process" in text

    # a recorded stage read from a platform (MLflow assessments, Inspect scores: `integrations.recorded`) is the same
    from_platform = RecordedJudge.from_lines([{"id": "a", "passed": True, "score": 1.0, "abstained": False}],
                                             "mlflow: run r1")
    assert gives_judge_verdicts(from_platform) and gives_judge_verdicts(python)
    assert not gives_judge_verdicts(floor)

    # an LLM stage: its calls are both judge verdicts and LM calls, and both are said
    both = Cascade([floor, TrajectoryJudge()], [StageRule("floor", 0.9, 0.1), StageRule("judge", 0.8, 0.2)])
    with dspy.context(lm=ScriptedLM(judge_answers)):
        verdicts = both.batch(data)
    summary = cascade_summary(both, verdicts, labels)
    assert summary["judge_verdicts"] == summary["lm_calls"] == verdicts.stage_calls["judge"] > 0
    text = format_cascade_summary(summary)
    assert _needed(summary["lm_calls"], 60) in text and f"LM calls: {summary['lm_calls']}, against 60" in text


def test_floors_only_need_no_judge_verdict(halves):
    data = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))[:30]
    floor = load_judge(halves / "floor.json")
    cascade = Cascade([floor], [StageRule("floor", 0.9, 0.1)])
    summary = cascade_summary(cascade, cascade.batch(data), [t.label for t in data])
    assert summary["judge_verdicts"] == 0 and summary["judge_stages"] == []
    text = format_cascade_summary(summary)
    assert "judge verdicts needed" not in text and "LM calls: 0 (no stage of the cascade makes LM calls)" in text


def test_the_risk_coverage_figure_draws_the_certified_alpha_and_false_pass_bound(halves, tmp_path):
    import io

    from rubricforge_dspy.report.cascade import cascade_lines, cascade_section, plot_risk_coverage

    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    cascade = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", str(verdicts),
                 "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.07", "--max-false-pass", "0.2",
                 "--bound", "pooled", "--method", "split_fixed_sequence",
                 "--out", str(cascade)]) == 0
    judged = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--out", str(judged)]) == 0
    found = cascade_lines([judged])
    assert found is not None
    section = cascade_section(*found)
    guarantee = section["guarantee"]
    assert guarantee["alpha"] == 0.07 and guarantee["max_false_pass"] == 0.2  # read from the cascade's guarantee
    fig = plot_risk_coverage(section)
    ax = fig.axes[0]
    bounds = {line.get_gid(): set(line.get_ydata()) for line in ax.get_lines() if line.get_gid()}
    assert bounds == {"certified_disagreement": {0.07}, "certified_false_pass": {0.2}}
    labels = ax.get_legend_handles_labels()[1]
    assert "certified disagreement <= 0.07, probability >= 0.90" in labels
    assert "certified false-pass <= 0.2, probability >= 0.90" in labels
    assert ax.get_ylim()[1] > 0.2  # both lines are inside the axes
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    assert 'id="certified_disagreement"' in svg.getvalue() and 'id="certified_false_pass"' in svg.getvalue()

    # a hand-set cascade has no certificate: no line is drawn as if it had one
    section["guarantee"] = None
    ax = plot_risk_coverage(section).axes[0]
    assert not [line for line in ax.get_lines() if line.get_gid()]


def test_the_demo_lead_gives_the_cost_in_the_same_words():
    from rubricforge_dspy.report.cascade import fit_lead_lines

    result = {"certified": True, "n": 188, "guarantee": {"alpha": 0.2, "delta": 0.1}, "free": 87,
              "free_false_pass": None, "to_llm": 101, "llm_decided": 80, "to_person": 21, "lm_calls_saved": 87}
    lead = "\n".join(fit_lead_lines(result, embedded=False))
    assert "- **cost**: judge verdicts needed: 101 of 188 (46% saved): the LLM judge's calls (87 of 188 LM" in lead
