"""label-next: the ranking signals, the one-per-task pick, and a written file that round-trips through
the loader once a person fills in the labels."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.trust.label_next import closeness, pick, rank
from tests.support.helpers import make_dataset


def verdict(i, score, passed=None):
    return {"id": i, "passed": score >= 0.5 if passed is None else passed, "score": score, "abstained": False}


def test_closeness_disagreement_and_criteria_split_rank_items():
    data = make_dataset(4)
    ids = [t.id for t in data]
    main_v = {ids[0]: verdict(ids[0], 0.95), ids[1]: verdict(ids[1], 0.55), ids[2]: verdict(ids[2], 0.9),
              ids[3]: verdict(ids[3], 0.3)}
    other = {ids[0]: verdict(ids[0], 0.9), ids[1]: verdict(ids[1], 0.6), ids[2]: verdict(ids[2], 0.2),
             ids[3]: verdict(ids[3], 0.3)}
    no_goal = {i: dict(v) for i, v in main_v.items()}
    no_goal[ids[3]] = verdict(ids[3], 0.8)  # removing criterion 1 flips item 3
    ranked = rank(data, main_v, {"main": main_v, "other": other}, {"1_goal": no_goal})
    by_id = {c.trajectory.id: c for c in ranked}
    assert by_id[ids[1]].signals["closeness"] == pytest.approx(0.9)
    assert by_id[ids[2]].signals["disagreement"] == 1.0 and by_id[ids[0]].signals["disagreement"] == 0.0
    assert by_id[ids[3]].signals["criteria_split"] == 1.0 and by_id[ids[3]].split_criteria == ("1_goal",)
    assert [c.trajectory.id for c in ranked] == [ids[3], ids[2], ids[1], ids[0]]
    assert closeness({"abstained": True, "score": 0.0}) == 1.0


def test_pick_spreads_over_tasks_first():
    data = make_dataset(3, trials=3)  # tasks t0..t2, three trials each
    scores = {t.id: 0.5 if t.task_id == "t0" else 0.9 for t in data}
    ranked = rank(data, {i: verdict(i, s) for i, s in scores.items()}, {}, {})
    chosen = pick(ranked, 4)
    assert sorted({c.trajectory.task_id for c in chosen}) == ["t0", "t1", "t2"] and len(chosen) == 4


def test_label_next_cli_writes_a_file_ready_to_label(tmp_path, capsys):
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
    from tests.support.records import write_labeled_jsonl

    data = make_dataset(10)
    unlabeled = write_labeled_jsonl(tmp_path / "pool.jsonl", data)
    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program)

    def respond(body, n):  # scores 0.05, 0.15, ... by flight number: flight 5 (0.55) is nearest 0.5
        flight = int(user_text(body).split("HAT")[1][:3])
        score = 0.05 + 0.1 * flight
        return {"reason": "r", "passed": score >= 0.5, "score": score}

    out = tmp_path / "to_label.jsonl"
    with FakeOpenAI(responder=respond) as fake:
        code = main(["label-next", "--program", str(program), "--data", str(unlabeled), "-k", "3", "--out", str(out),
                     "--api-base", fake.api_base, "--model", fake.model])
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["synthetic:t4:0", "synthetic:t5:0", "synthetic:t3:0"]
    assert all(r["label"] is None and r["reward"] is None for r in lines)
    assert lines[0]["metadata"]["label_next"]["rank"] == 1
    # Unfilled, it loads as unlabeled (judge it, or join labels by id); filled in, it loads and renders
    # exactly as the source did.
    unfilled = load_trajectories([str(out)])
    assert all(t.label is None for t in unfilled)
    from rubricforge_dspy.data.labels import join_labels

    csv = tmp_path / "labels.csv"
    csv.write_text("id,label\nsynthetic:t4:0,1\nsynthetic:t5:0,0\n")
    joined = join_labels(unfilled, csv)
    report = joined.report
    assert [t.label for t in joined] == [1, 0, None]
    assert report.without_label == ["synthetic:t3:0"] and report.matched == 2
    filled = tmp_path / "labeled.jsonl"
    filled.write_text("".join(json.dumps({**r, "label": 1, "reward": 1.0}) + "\n" for r in lines))
    back = load_trajectories([str(filled)])
    source = {t.id: t for t in data}
    assert [render_trajectory(t) for t in back] == [render_trajectory(source[t.id]) for t in back]
    assert not any("CANARY" in json.dumps(r) for r in lines)  # hidden fields of the source are not copied
    with FakeOpenAI(responder=respond) as fake:  # an output file is never overwritten
        assert main(["label-next", "--program", str(program), "--data", str(unlabeled), "--out", str(out),
                     "--api-base", fake.api_base, "--model", fake.model]) == 2
    assert "exists" in capsys.readouterr().err
