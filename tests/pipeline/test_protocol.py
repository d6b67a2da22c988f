"""The protocol end to end, offline: split, GEPA induction, baselines, ablation, persisted predictions, report."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.induction import InductionConfig
from rubricforge_dspy.pipeline.protocol import JUDGES, ProtocolConfig, run_protocol
from rubricforge_dspy.report import write_report
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.helpers import make_dataset
from tests.support.induction import make_reflection_lm, scripted_judge


@pytest.mark.slow
def test_protocol_writes_every_judge_ablation_and_a_reproducible_report(tmp_path):
    data = make_dataset(30)
    run_dir = run_protocol(
        data, tmp_path / "run", judge_lm=ScriptedLM(scripted_judge, model="scripted-judge"),
        reflection_lm=make_reflection_lm([]), judge_lm_name="scripted-judge", reflection_lm_name="scripted-reflection",
        program_path=tmp_path / "programs" / "induced.json", dataset="synthetic",
        config=ProtocolConfig(induction=InductionConfig(budget=60, minibatch=3)),
    )
    run = json.loads((run_dir / "run.json").read_text())
    assert run["lm"] == "scripted-judge" and run["beat_seed"] is True
    test_ids = None
    for judge in JUDGES:
        lines = [json.loads(x) for x in (run_dir / "predictions" / f"{judge}.jsonl").read_text().splitlines()]
        ids = sorted(x["id"] for x in lines)
        assert test_ids is None or ids == test_ids
        test_ids = ids
    assert len(test_ids) == run["split"]["test"]["trajectories"]
    criteria = json.loads((run_dir / "ablation" / "criteria.json").read_text())
    assert len(criteria) == 7 and len(list((run_dir / "ablation").glob("*.jsonl"))) == 7

    report = json.loads((run_dir / "report.json").read_text())
    rows = {row["judge"]: row for row in report["main"]}
    # the scripted judge with the induced error criterion is perfect on this data; the seed passes everything
    assert rows["induced"]["false_pass_rate"] == 0.0 and rows["induced"]["accuracy"] == 1.0
    assert rows["geval"]["false_pass_rate"] == 1.0
    assert rows["oracle"]["accuracy"] == 1.0
    ablated = {row["name"]: row for row in report["ablation"]["rows"]}
    # removing the induced criterion brings the seed's blind spot back; removing any other changes nothing
    assert ablated["Error counter"]["delta_false_pass_rate"] == 1.0
    assert all(row["delta_accuracy"] == 0.0 for name, row in ablated.items() if name != "Error counter")
    markdown = (run_dir / "report.md").read_text()
    assert "scripted-judge" in markdown and "Error counter" in markdown
    # the frozen program carries a certificate measured on the test split's persisted verdicts
    from rubricforge_dspy.program.store import read_program

    certificate = read_program(tmp_path / "programs" / "induced.json")["rubricforge"]["certificate"]
    induced = [json.loads(x) for x in (run_dir / "predictions" / "induced.jsonl").read_text().splitlines()]
    assert certificate["n"] == len(induced) and certificate["false_pass"]["k"] == sum(
        x["passed"] and x["label"] == 0 for x in induced)
    assert all(x["score_calibrated"] is not None for x in induced if not x["abstained"])

    # the floor rows: fit on the training split, judged on the same test items, in the report and the certificate
    assert {"floor", "length_only", "hybrid"} <= set(rows) and set(run["judges"]) == set(JUDGES)
    assert rows["floor"]["n"] == rows["induced"]["n"] and rows["floor"]["mcnemar"] is not None
    assert "## The floor" in markdown and markdown.index("## The floor") < markdown.index("## Main table")
    assert report["floor"]["gives_away"] is not None
    assert certificate["floor"]["source"].startswith("the symptom floor fit on the training split")
    from rubricforge_dspy.judge.floor import SymptomFloor
    from rubricforge_dspy.judge.loading import load_judge

    models = json.loads((run_dir / "floor.json").read_text())
    assert SymptomFloor.from_dict(models["floor"]).trained_on["n"] == run["split"]["train"]["trajectories"]
    hybrid = load_judge(run["hybrid_program"], check_certificate=False)
    assert hybrid.stack.fit["n"] == run["split"]["val"]["trajectories"]
    assert read_program(run["hybrid_program"])["rubricforge"]["certificate"]["n"] == len(induced)

    write_report(run_dir, tmp_path / "again.md")
    assert (tmp_path / "again.md").read_text().replace("again", "report") == markdown.replace("again", "report")


@pytest.mark.slow
def test_a_new_run_starts_over_unless_resumed(tmp_path):
    data = make_dataset(20)

    def run(resume):
        lm = ScriptedLM(scripted_judge, model="scripted-judge")
        run_protocol(data, tmp_path / "run", judge_lm=lm, reflection_lm=make_reflection_lm([]), judge_lm_name="j",
                     reflection_lm_name="r", program_path=tmp_path / "p.json", dataset="synthetic",
                     config=ProtocolConfig(induction=InductionConfig(budget=20, minibatch=2), ablation=False),
                     resume=resume)
        return lm.calls

    (tmp_path / "run" / "predictions").mkdir(parents=True)
    (tmp_path / "run" / "predictions" / "stale.jsonl").write_text("{}\n")
    first = run(resume=False)
    assert not (tmp_path / "run" / "predictions" / "stale.jsonl").exists()
    assert run(resume=False) == first  # starting over judges everything again
    assert run(resume=True) < first  # resuming skips persisted verdicts
