"""The cascade from the command line: `cascade fit` (happy path, and a refusal with the labels needed: exit 2),
`judge --cascade` (verdict lines name the deciding stage, the escalated items form a labeling queue, and a
floor-decided trajectory makes no request to a recording OpenAI-compatible server on 127.0.0.1),
`load_judge` of a cascade, and `label-next` putting escalated items first."""

from __future__ import annotations

import math
from pathlib import Path

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.verdict import check_line
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade, StageRule
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.trust.label_next import rank
from tests.support.cascade import REWARD_ABOVE_0, lines_of, save_cascade


def test_cascade_fit_saves_a_cascade_that_load_judge_reads(halves, tmp_path, capsys):
    out = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(halves / "cal.jsonl"),
                 "--order-data", str(halves / "train.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.2", "--delta", "0.1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # 90% of this set passes: passing everything has pooled disagreement < 0.1 but passes every failure; the
    # per-stage default bounds the floor's false passes too, so it certifies only the floor's sure failures
    assert "certified: disagreement <= 0.2 and false-pass <= 0.1 for every stage" in printed
    assert "floor:" in printed and str(out) in printed
    assert "ordering data: 250 labeled trajectories apart from the calibration" in printed
    cascade = load_judge(out)
    assert isinstance(cascade, Cascade) and [r.name for r in cascade.rules] == ["floor"]
    assert isinstance(cascade.stages[0], FloorJudge)
    assert cascade.guarantee["alpha"] == 0.2 and cascade.fit_report["units"]["trials_used"] == 250
    floor_row = cascade.fit_report["stages"][0]
    assert floor_row["decided"] > 0  # the floor's kappa on this set is 0.75: it decides a share for free
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"cascade {out}: floor -> a person" in shown and "certified: disagreement <= 0.2" in shown


def test_cascade_fit_refuses_a_too_small_set_with_the_labels_needed(halves, tmp_path, capsys):
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join((halves / "cal.jsonl").read_text().splitlines()[:12]) + "\n")
    out = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(small), *REWARD_ABOVE_0,
                 "--alpha", "0.2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cascade fit refused" in err and "12 calibration trajectories of 12 tasks given" in err
    needed = int(err.split("certifying it needs about ")[1].split()[0])  # how many labeled tasks alpha 0.2 needs
    assert needed > 12 and "the sequence stopped at its first vector not certified" in err
    assert not out.exists()


def test_cascade_fit_rejects_bad_bounds_before_any_work(halves, tmp_path, capsys):
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(halves / "cal.jsonl"),
                 "--alpha", "1.5", "--out", str(tmp_path / "c.json")]) == 2
    assert "--alpha" in capsys.readouterr().err


def test_judge_with_a_floor_only_cascade_makes_no_request_and_queues_the_rest(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, None)
    out = tmp_path / "v.jsonl"
    with FakeOpenAI() as fake:
        assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--out", str(out), "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        assert fake.n_requests == 0
    lines = lines_of(out)
    assert len(lines) == 250 and all(check_line(x, "v.jsonl")["id"] == x["id"] for x in lines)
    stages = [x["stage"] for x in lines]
    assert set(stages) <= {"floor", "escalated"} and "floor" in stages
    floor_lines = [x for x in lines if x["stage"] == "floor"]
    assert all(not x["abstained"] and x["stage_index"] == 0 and x["reason"].startswith("[floor]") for x in floor_lines)
    escalated = [x for x in lines if x["stage"] == "escalated"]
    assert all(x["abstained"] and x["error_kind"] == "escalated" and x["stage_index"] is None for x in escalated)
    queue = lines_of(Path(f"{out}.escalated.jsonl"))
    assert [r["id"] for r in queue] == [x["id"] for x in escalated]
    assert all(r["label"] is None and r["reward"] is None for r in queue)
    assert "escalated to a person" in capsys.readouterr().err


def test_judge_cascade_asks_the_lm_only_for_what_the_floor_left(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out, queue = tmp_path / "v.jsonl", tmp_path / "queue.jsonl"
    answers = [{"reason": "The agent bought the item.", "passed": True, "score": 0.9},
               {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}]
    with FakeOpenAI(lambda body, n: answers[n % 2]) as fake:
        assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--limit", "60", "--out", str(out), "--escalated-out", str(queue), "--concurrency", "2",
                     "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        asked = [user_text(body) for body in fake.chat_bodies]
    lines = lines_of(out)
    by_stage = {s: [x for x in lines if x["stage"] == s] for s in ("floor", "judge", "escalated")}
    assert len(lines) == 60 and by_stage["floor"] and by_stage["judge"] and by_stage["escalated"]
    assert len(asked) == len(by_stage["judge"]) + len(by_stage["escalated"])  # one request per item the floor left
    # a request reads one trajectory: the instruction of a floor-decided one (unique in the set) is in none
    data = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))
    instruction = {t.id: t.steps[0].content.strip() for t in data}
    unique = {text for text in instruction.values() if list(instruction.values()).count(text) == 1}
    floor_only = [instruction[x["id"]] for x in by_stage["floor"] if instruction[x["id"]] in unique]
    assert floor_only and not any(text in body for text in floor_only for body in asked)
    left = [instruction[x["id"]] for x in by_stage["judge"] + by_stage["escalated"] if instruction[x["id"]] in unique]
    assert all(any(text in body for body in asked) for text in left)
    assert all(x["label"] in (0, 1) for x in lines)  # the labels ride along in the lines, never in a request
    assert [r["id"] for r in lines_of(queue)] == [x["id"] for x in by_stage["escalated"]]
    # the same output on other data (another label threshold, another server) is another job: refused before any request
    with FakeOpenAI() as fake:
        assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), "--out", str(out),
                     "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 2
        assert fake.n_requests == 0
    err = capsys.readouterr().err
    assert "belongs to another job (" in err and "other input data" in err


def test_judge_program_that_is_a_cascade_file_runs_as_a_cascade(halves, tmp_path):
    cascade = save_cascade(halves, tmp_path, None)
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--program", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "10", "--out", str(out)]) == 0
    assert {x["stage"] for x in lines_of(out)} <= {"floor", "escalated"} and len(lines_of(out)) == 10


def test_an_all_escalated_run_is_not_a_judge_failure(halves, tmp_path, capsys):
    floor = FloorJudge(SymptomFloor.from_json((halves / "floor.json").read_text()))
    path = tmp_path / "never.json"
    Cascade([floor], [StageRule("floor", math.inf, -1e-9)]).save(path)  # a floor that never decides
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(path), "--data", str(halves / "cal.jsonl"), "--limit", "5",
                 "--out", str(out)]) == 0
    assert all(x["stage"] == "escalated" for x in lines_of(out))
    assert "went to a person" in capsys.readouterr().err


def test_label_next_puts_escalated_items_first(halves, tmp_path):
    data = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))[:6]
    verdicts = {t.id: {"id": t.id, "passed": True, "score": 0.5, "abstained": False, "stage": "judge"}
                for t in data}  # every decided one as close to the threshold as can be
    for t in data[4:]:
        verdicts[t.id] = {"id": t.id, "passed": False, "score": 0.0, "abstained": True, "stage": "escalated"}
    ranked = rank(data, verdicts, {"cascade": verdicts}, {})
    assert [c.trajectory.id for c in ranked[:2]] == sorted(t.id for t in data[4:])
    assert all(c.escalated for c in ranked[:2]) and not any(c.escalated for c in ranked[2:])


def test_judge_cascade_with_a_dead_llm_stage_is_exit_3_never_an_escalation(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: "http_500") as fake:
        assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--limit", "40", "--out", str(out), "--concurrency", "1", "--max-consecutive-errors", "3",
                     "--api-base", fake.url + "/v1", "--model", "fake-judge", "--timeout", "5"]) == 3
        assert fake.n_requests >= 3
    err = capsys.readouterr().err
    assert "error: JudgeUnavailableError" in err and "verdict line(s) of this run are kept" in err
    lines = lines_of(out)  # the floor's verdicts are kept; the judge's failures are LM errors, never escalations
    assert {x["stage"] for x in lines} == {"floor", "judge"}
    assert all(x["abstained"] and x["error_kind"] not in ("escalated", None) for x in lines if x["stage"] == "judge")
    assert not any(x["stage"] == "escalated" for x in lines) and lines_of(Path(f"{out}.escalated.jsonl")) == []


def test_label_next_command_lists_a_cascade_runs_escalated_items_first(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, None)
    verdicts, picks = tmp_path / "v.jsonl", tmp_path / "to_label.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "40", "--out", str(verdicts)]) == 0
    escalated = {x["id"] for x in lines_of(verdicts) if x["stage"] == "escalated"}
    assert 0 < len(escalated) < 40
    k = len(escalated) + 3
    assert main(["label-next", "--verdicts", str(verdicts), "--data", str(halves / "cal.jsonl"), "-k", str(k),
                 "--out", str(picks)]) == 0
    chosen = lines_of(picks)
    assert len(chosen) == k and {r["id"] for r in chosen[: len(escalated)]} == escalated
    assert all(r["metadata"]["label_next"]["escalated"] for r in chosen[: len(escalated)])
    assert not any(r["metadata"]["label_next"]["escalated"] for r in chosen[len(escalated):])
