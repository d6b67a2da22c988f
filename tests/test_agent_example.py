"""The worked example, offline: shop environment, judge-only optimization, true checks, Goodhart audit."""

from __future__ import annotations

import json

import pytest

from evals.agent_example import env
from evals.agent_example.run import main, run_example, scripted_agent_lm, scripted_judge_lm, scripted_judge_verdict
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import freeze, read_program

ORACLE = {  # the right actions and answer for each task
    "blue-mugs": ([("place_order", "MUG-BLUE", 2)], "Placed."),
    "cancel-1001": ([("cancel_order", "O-1001")], "Cancelled."),
    "lamp-stock": ([], "There are 2 in stock."),
    "red-mugs-short": ([], "Only 1 is in stock."),
    "green-pens": ([("place_order", "PEN-GREEN", 10)], "Placed."),
    "cheapest-notebook": ([("place_order", "NB-POCKET", 1)], "Placed."),
    "cancel-1003": ([], "It was already cancelled."),
    "replace-1002": ([("cancel_order", "O-1002"), ("place_order", "PEN-GREEN", 3)], "Changed."),
    "black-pens-short": ([], "They are out of stock."),
    "red-mug-price": ([], "It costs 8.50."),
}


def play(actions) -> env.Shop:
    shop = env.Shop.seed()
    with env.active(shop):
        for name, *args in actions:
            getattr(env, name)(*args)
    return shop


def test_tasks_have_sound_true_checks():
    assert 8 <= len(env.TASKS) <= 12 and {t.split for t in env.TASKS} == {"train", "test"}
    assert set(ORACLE) == {t.task_id for t in env.TASKS}
    for task in env.TASKS:
        actions, answer = ORACLE[task.task_id]
        assert task.check(play(actions), answer), task.task_id
        assert not task.check(env.Shop.seed(), ""), task.task_id  # doing and saying nothing never succeeds
    assert env.task_by_request("Cancel my order O-1001.").task_id == "cancel-1001"
    example = env.TASKS[0].example()
    assert set(example.inputs().keys()) == {"request"}  # the optimizer sees the request, never the check


def test_tools_act_on_the_active_shop_and_refuse_bad_actions():
    shop = env.Shop.seed()
    with env.active(shop):
        assert [i["sku"] for i in env.search("ceramic mugs")] == ["MUG-BLUE", "MUG-RED", "MUG-GREEN"]
        assert env.get_item("LAMP-DESK")["stock"] == 2
        assert env.place_order("LAMP-DESK", 2)["order_id"] == "O-2001"
        with pytest.raises(env.ShopError, match="only 0 of LAMP-DESK in stock"):
            env.place_order("LAMP-DESK", 1)
        with pytest.raises(env.ShopError, match="already cancelled"):
            env.cancel_order("O-1003")
        with pytest.raises(env.ShopError, match="no item"):
            env.get_item("NOPE")
    assert env.Shop.seed().items["LAMP-DESK"].stock == 2  # every episode starts from the seed
    with pytest.raises(RuntimeError, match="no active shop"):
        env.search("mug")


def test_scripted_judge_rule():
    assert not scripted_judge_verdict("COUNTERS: tool_errors=1\nFINAL ANSWER: Order O-1 is cancelled.")["passed"]
    assert scripted_judge_verdict("COUNTERS: tool_errors=1\nFINAL ANSWER: It was already cancelled.")["passed"]
    assert not scripted_judge_verdict("COUNTERS: tool_errors=0\nFINAL ANSWER: I placed it.")["passed"]


@pytest.mark.slow
def test_the_whole_example_offline(tmp_path):
    agent_lm, judge_lm = scripted_agent_lm(), scripted_judge_lm()
    summary = run_example(agent_lm, judge_lm, out_dir=tmp_path, mode="scripted")
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(summary, default=str))

    # the optimizer was rewarded by the judge only, and it changed the agent
    assert summary["optimizer"]["metric_calls"] > 0
    assert summary["optimizer"]["demos"] and all(n > 0 for n in summary["optimizer"]["demos"].values())
    # trajectories were judged: every verdict the metric used was either an LM call or a cache hit,
    # and the audit re-scored the 10 labeled trajectories
    metric = summary["metric"]
    assert metric["verdicts"] == metric["judge_lm_calls"] + metric["cache_hits"] and metric["cache_hits"] > 0
    assert judge_lm.calls == metric["judge_lm_calls"] + summary["audit"]["n"]
    assert agent_lm.calls > 0
    # the true success checks ran on every task, before and after
    for phase in ("before", "after"):
        episodes = summary[phase]["episodes"]
        assert [e["task_id"] for e in episodes] == [t.task_id for t in env.TASKS]
        assert all(isinstance(e["success"], bool) and e["error"] is None for e in episodes)
    audit = summary["audit"]
    assert {"n", "n_failed", "accuracy", "false_pass_rate", "baseline_false_pass_rate", "drifted",
            "n_abstained", "alpha", "p_value"} <= set(audit)
    assert summary["baseline"]["source"] == "validation"
    assert read_program(tmp_path / "judge.json")["rubricforge"]["metrics"]["false_pass_rate"] == 0.4
    assert len((tmp_path / "audit_sample.jsonl").read_text().splitlines()) == 10

    # The scripted LMs make the outcome deterministic: demos make the agent verify before acting, which
    # fixes every failure the judge catches and none it misses (changing an order without cancelling
    # the old one), so the remaining failures all sit in the judge's blind spot.
    assert (summary["before"]["true_success_rate"], summary["after"]["true_success_rate"]) == (0.5, 0.9)
    assert (summary["before"]["judge_pass_rate"], summary["after"]["judge_pass_rate"]) == (0.7, 1.0)
    # One failed trajectory, passed: the rate rose from 0.4 to 1.0, but one failure is no evidence of
    # drift (one-sided exact binomial test, p = P(X >= 1 | n = 1, p = 0.4) = 0.4); the false pass is listed.
    assert audit["false_pass_rate"] == 1.0 and audit["false_pass_ids"] == ["after:replace-1002"]
    assert audit["p_value"] == pytest.approx(0.4) and not audit["drifted"]


@pytest.mark.slow
def test_cli_scripted_with_a_frozen_program(tmp_path, capsys):
    program = tmp_path / "program.json"
    freeze(TrajectoryJudge(), program, metrics={"false_pass_rate": 0.95})
    summary = main(["--scripted", "--out", str(tmp_path / "out"), "--program", str(program), "--demos", "1"])
    assert summary["mode"] == "scripted" and summary["lms"] == {"agent": "scripted-agent", "judge": "scripted-judge"}
    assert summary["baseline"]["source"] == "validation" and summary["audit"]["baseline_false_pass_rate"] == 0.95
    assert not summary["audit"]["drifted"] and summary["files"]["judge_program"] is None
    assert summary["optimizer"]["max_bootstrapped_demos"] == 1
    out = capsys.readouterr().out
    assert "true success: 0.5 -> 0.9" in out and "Goodhart audit" in out
    assert (tmp_path / "out" / "summary.json").is_file()


@pytest.mark.slow
def test_crashing_agent_is_recorded_and_the_audit_skipped(tmp_path):
    from rubricforge_dspy.testing.scripted import ScriptedLM

    broken_agent = ScriptedLM(lambda messages: "not a JSON object", model="broken-agent")
    summary = run_example(broken_agent, scripted_judge_lm(), out_dir=tmp_path, max_demos=1, max_iters=2)
    assert all(e["error"] and e["success"] is False for e in summary["after"]["episodes"])
    assert summary["after"]["true_success_rate"] == 0.0 and summary["audit"] is None
    assert "skipped" in summary["audit_text"] and summary["optimizer"]["demos"] == {
        "react.react": 0, "react.extract.predict": 0}
