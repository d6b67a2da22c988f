"""`map check`'s scan for short tokens whose presence predicts the label (docs/MAPPING.md, "rubricforge map
check"): planted leaks are reported with the field and the share they predict; an honest set reports none."""

from __future__ import annotations

import json
import random

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.pipeline.map_check import PREDICT_MIN_CLASS, check_mapping

# `map check --map` and `check_mapping` register the mapping as a format in this process: undo it after each test
pytestmark = pytest.mark.usefixtures("format_registry_as_before")

TOOLS = ("search", "click", "read_file", "run_tests")


def _records(n=200, seed=7, answer=None, plan=None):
    """`n` records, half passing, each with a task, tool calls drawn from the same tools in both classes,
    observations in plain English, a final answer and a plan; `answer(i, label)` and `plan(i, label)` say what
    those hold."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        tools = [rng.choice(TOOLS) for _ in range(rng.randint(2, 5))]
        rows.append({
            "id": f"r{i}", "task": f"Find the cheapest {rng.choice(['lamp', 'chair', 'desk'])} in the store {i}",
            "actions": [f"{tool}[{rng.randint(0, 99)}]" for tool in tools],
            "observations": [f"the page shows {rng.randint(1, 9)} results for the query" for _ in tools],
            "answer": answer(i, label) if answer else f"I think the answer is item {rng.randint(0, 999)}",
            "plan": plan(i, label) if plan else "look at the store, then compare the prices",
            "reward": label})
    return rows


def _check(tmp_path, rows, **fields):
    mapping = {"name": "planted", "records": {"from": "jsonl"}, "id": "id", "task": "task",
               "actions": "actions", "observations": "observations", "final_answer": "answer", "reward": "reward",
               "label": "reward >= 1", **fields}
    (tmp_path / "map.json").write_text(json.dumps(mapping), encoding="utf-8")
    data = tmp_path / "log.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return data, tmp_path / "map.json"


def _flagged(report):
    return {(p["field"], p["token"]): p for p in report.predictors}


def test_a_reward_copied_into_the_final_answer_is_reported(tmp_path, capsys):
    data, mapping = _check(tmp_path, _records(answer=lambda i, label: f"Done, I bought it. reward={label}"))
    report = check_mapping(data, mapping)
    flagged = _flagged(report)
    one = flagged[("final_answer", "reward=1")]
    assert (one["label"], one["predicted"], one["records"], one["share"]) == (1, 200, 200, 1.0)
    assert one["present"] == {1: 100, 0: 0} and ("final_answer", "reward=0") in flagged
    assert not report.ok and not any(token == "1" for _, token in flagged)  # the pair says it, not its words
    text = report.format()
    assert "LEAK: the token 'reward=1' in final_answer is in 100 of 100 label-1 records" in text
    assert "predicts the label on 200 of 200 (100%)" in text
    assert main(["map", "check", "--map", str(mapping), "--data", str(data)]) == 2
    assert "'reward=1' (final_answer)" in capsys.readouterr().out


def test_plan_text_ending_in_success_true_is_reported(tmp_path):
    """The plan, rendered as the agent's thoughts, ends in ``success: True`` on passing records and
    ``success: False`` on failing ones, except 9 of 200 where it is wrong: still reported (191 of 200)."""
    wrong = set(range(0, 18, 2))  # 9 failing records whose plan says True

    def plan(i, label):
        said = bool(label) or i in wrong
        return f"Find the lamp at depth 1, then pay at depth 2, success: {said}"
    data, mapping = _check(tmp_path, _records(plan=plan), thoughts="[plan]", actions="[actions[0]]",
                           observations="[observations[0]]")
    report = check_mapping(data, mapping)
    true = _flagged(report)[("thoughts", "success: True")]
    assert (true["label"], true["predicted"], true["present"]) == (1, 191, {1: 100, 0: 9})
    assert "predicts the label on 191 of 200 (96%)" in report.format() and not report.ok


def test_an_honest_set_reports_no_predictor(tmp_path):
    """Common words (``the``), tools both classes call, and a tool one class calls more often (not almost
    always) are no leak; nor are the renderer's markers, which are not the steps' text."""
    rows = _records()
    for row in rows:
        if row["reward"] == 1 and int(row["id"][1:]) % 10 < 7:  # 70% of passing records vs 0%: a real signal
            row["actions"].append("compare[prices]")
            row["observations"].append("TOOL RESULT: the COUNTERS: steps=3 of the ASSISTANT RESULT")
        else:
            row["observations"][0] += " TOOL RESULT: the COUNTERS: steps=3 of the ASSISTANT RESULT"
    data, mapping = _check(tmp_path, rows)
    report = check_mapping(data, mapping)
    assert report.predictors == [] and report.leaks == {} and report.ok, report.format()
    assert report.scanned == 200 and "LEAK" not in report.format()


def test_too_few_records_of_a_class_say_nothing(tmp_path):
    n = 2 * (PREDICT_MIN_CLASS - 1)
    data, mapping = _check(tmp_path, _records(n=n, answer=lambda i, label: f"reward={label}"))
    assert check_mapping(data, mapping).predictors == []


@pytest.mark.parametrize("field,form", [("final_answer", '{"passed": true}'), ("final_answer", "PASSED=yes")])
def test_outcome_pairs_in_other_spellings(tmp_path, field, form):
    """A JSON ``"passed": true`` reads as the pair ``passed: true``; an outcome word named pair that follows
    the label in most records (the success words' rule) is reported too."""
    negative = form.replace("true", "false").replace("yes", "no")
    data, mapping = _check(tmp_path, _records(answer=lambda i, label: form if label or i % 10 == 0 else negative))
    tokens = {token for (name, token) in _flagged(check_mapping(data, mapping)) if name == field}
    assert tokens & {"passed: true", "PASSED=yes"}


def test_the_renderers_own_counters_are_not_tokens(tmp_path):
    """Passing records take 5 actions and failing ones 2, so the render's ``COUNTERS: steps=12`` /
    ``steps=6`` lines split the labels perfectly; they are the renderer's words, not a mapped field's, and
    the length of a trajectory is the judge's to weigh: nothing is reported."""
    rows = _records()
    for row in rows:
        count = 5 if row["reward"] else 2
        row["actions"], row["observations"] = row["actions"][:1] * count, row["observations"][:1] * count
    data, mapping = _check(tmp_path, rows)
    report = check_mapping(data, mapping)
    assert "steps=12" in report.first_render or "steps=6" in report.first_render
    assert report.predictors == [] and report.ok, report.format()
