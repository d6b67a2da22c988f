"""Each shipped mapping sample converts and renders: ids, task ids and labels from the rule, evidence in the
render, and nothing of the label, the reward or the hidden fields in it."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.data.formats import LoadReport
from rubricforge_dspy.data.formats.mapping import MapStats, iter_mapped, load_mapping
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from tests.support.mapping_samples import SAMPLES

FULL_VIEW = RenderConfig(max_tokens=10**7, max_step_chars=10**7)  # render everything, hide nothing


def _load(sample, **kwargs):
    report = LoadReport()
    trajectories = list(iter_mapped(sample.data, sample.mapping, on_error="skip", report=report, **kwargs))
    return trajectories, report


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_converts_with_ids_and_labels_from_the_rule(name):
    sample = SAMPLES[name]
    trajectories, report = _load(sample)
    assert [t.id for t in trajectories] == list(sample.ids)
    assert [t.task_id for t in trajectories] == list(sample.task_ids)
    assert [t.label for t in trajectories] == list(sample.labels)
    assert report.loaded == len(sample.ids) and len(report.skipped) == sample.skipped
    mapping = load_mapping(sample.mapping)
    assert all(t.hidden["format"] == mapping.name and t.hidden["label_rule"] == str(mapping.label_rule)
               for t in trajectories)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_renders_evidence_and_no_label(name):
    sample = SAMPLES[name]
    trajectories, _ = _load(sample)
    for trajectory in trajectories:
        text = render_trajectory(trajectory, FULL_VIEW)
        assert any(step.kind in ("tool_call", "tool_result", "assistant", "final_answer") for step in trajectory.steps)
        observable = [s.content for s in trajectory.steps if s.content.strip()]
        assert observable and all(piece.strip().splitlines()[0] in text for piece in observable)
        for secret in sample.secrets:
            assert secret not in text, f"{trajectory.id}: {secret!r} leaked into the render"


def test_parallel_lists_pair_actions_with_observations_and_error_flags():
    sample = SAMPLES["intercode_bash"]
    trajectories, _ = _load(sample)
    record3 = trajectories[2]
    assert record3.steps[0].kind == "user" and record3.steps[0].content.startswith("Calculate the md5 sum")
    results = [s for s in record3.steps if s.kind == "tool_result"]
    calls = [s for s in record3.steps if s.kind == "tool_call"]
    assert len(calls) == len(results) == 10
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    # valid_action [T, T, T, F, T, F, T, F, T, F]: the mapping's `map(&!@, ...)` flags the four failed turns
    assert [r.is_error for r in results] == [False, False, False, True, False, True, False, True, False, True]
    assert record3.reward == pytest.approx(0.67) and record3.hidden["turn_rewards"] == [0.67] * 10


def test_chat_messages_map_roles_and_tool_calls():
    trajectories, report = _load(SAMPLES["toolbench"])
    first = trajectories[0]
    kinds = [s.kind for s in first.steps]
    assert kinds == ["user", "tool_call", "tool_result", "tool_call", "tool_result", "tool_call", "final_answer"]
    assert first.steps[1].tool_name == "transitaires_for_transitaires"
    assert first.steps[2].call_id == first.steps[1].call_id
    assert first.steps[3].arguments == {"is_id": "ACT_AGENCE_CALEDONIENNE_DE_TRANSIT"}
    assert "AutoGPT" in first.hidden["system_prompt"] and "AutoGPT" not in render_trajectory(first, FULL_VIEW)
    assert first.hidden["win"] is True
    # the record ToolBench itself marks valid_data=false has no conversation and no answer: skipped, counted, named
    (file, record, problem), = report.skipped
    assert record == "G1_answer/69_ChatGPT_DFS_woFilter_w2" and "no observable step" in problem
    assert file.endswith("69_ChatGPT_DFS_woFilter_w2.json")


def test_jsonl_chat_history_closes_on_the_final_answer():
    trajectories, _ = _load(SAMPLES["mint"])
    solved = trajectories[2]
    assert [s.kind for s in solved.steps] == ["user", "final_answer"]
    assert "<solution>" in solved.steps[-1].content
    assert solved.hidden["reference"] and solved.hidden["success"] is True


def test_a_label_canary_in_every_hidden_field_never_reaches_the_render(tmp_path):
    """The leak canary for mapped data: every field the mapping reads for the label, the reward or `hidden`
    is replaced by a canary (the label field by a passing value plus the canary where it is text)."""
    canary = "CANARY7f3a"
    source = SAMPLES["mint"]
    poisoned = tmp_path / "poisoned.jsonl"
    with open(source.data, encoding="utf-8") as handle, open(poisoned, "w", encoding="utf-8") as out:
        for line in handle:
            record = json.loads(line)
            record["task"]["reference"] = canary
            record["task"]["metadata"] = {"gold": canary}
            record["state"]["success"] = canary
            record["state"]["latest_output"] = {"feedback": canary}
            record["state"]["token_counter"] = {"note": canary}
            out.write(json.dumps(record) + "\n")
    trajectories = list(iter_mapped(poisoned, source.mapping))
    assert trajectories and all(t.hidden["reference"] == canary for t in trajectories)
    assert all(canary not in render_trajectory(t, FULL_VIEW) for t in trajectories)


def test_every_field_that_resolved_to_nothing_is_counted():
    stats = MapStats()
    trajectories, _ = _load(SAMPLES["reflexion_humaneval"], stats=stats)
    assert stats.records == 3
    # HumanEval/0 and /2 have no reflections; HumanEval/1 submitted an empty solution
    assert stats.empty["steps.path"] == 2 and stats.empty["final_answer"] == 1
    assert [s.kind for s in trajectories[1].steps] == ["user", "assistant"]


def test_a_mapping_is_a_format_with_name_read_and_label_rule():
    from rubricforge_dspy.data.formats.mapping import MappedFormat

    sample = SAMPLES["intercode_sql"]
    fmt = MappedFormat.of(sample.mapping)
    assert fmt.name == "intercode_sql" and str(fmt.label_rule) == "reward >= 1"
    assert fmt.sniff(sample.data) is False  # chosen with --map, never detected
    results = list(fmt.read(sample.data, fmt.label_rule))
    assert [(index, t.id, t.label) for index, t in results] == [
        ("0", "ic_sql:0", 1), ("1", "ic_sql:1", 1), ("802", "ic_sql:802", 0), ("524", "ic_sql:524", 0)]


def test_a_reward_canary_never_reaches_the_render(tmp_path):
    canary_reward, canary = 1.7315926, "CANARY7f3a"
    source = SAMPLES["intercode_bash"]
    document = json.loads(source.data.read_text(encoding="utf-8"))
    for record in document.values():
        record["summary"] = {"max_reward": canary_reward, "note": canary}
        record["turn_history"]["rewards"] = [canary_reward] * len(record["turn_history"]["rewards"])
        record["dataset"] = canary
    poisoned = tmp_path / "poisoned.json"
    poisoned.write_text(json.dumps(document), encoding="utf-8")
    trajectories = list(iter_mapped(poisoned, source.mapping))
    assert [t.reward for t in trajectories] == [canary_reward] * 4 and {t.label for t in trajectories} == {1}
    for trajectory in trajectories:
        text = render_trajectory(trajectory, FULL_VIEW)
        assert canary not in text and "1.7315926" not in text and "max_reward" not in text


def test_several_paths_load_as_one_with_ids_checked_across_them():
    sample = SAMPLES["intercode_sql"]
    report = LoadReport()
    loaded = list(iter_mapped([sample.data, sample.data], sample.mapping, on_error="skip", report=report))
    assert len(loaded) == 4 and report.loaded == 4
    assert [problem for _, _, problem in report.skipped] == [f"duplicate trajectory id {i!r}" for i in sample.ids]


@pytest.mark.parametrize("data", [SAMPLES["intercode_bash"].data, SAMPLES["intercode_sql"].data,
                                  SAMPLES["intercode_bash"].mapping.parent / "python"
                                  / "ic_python_multiturn_gpt-3.5_7_turns.sample.json"])
def test_the_intercode_mapping_marks_as_errors_the_turns_the_source_marks(data):
    """InterCode's own error signal: ``valid_action`` false (Bash, SQL), or, where InterCode-Python writes
    ``valid_action`` null on every turn, the environment's "Error executing action" reply. The shipped mapping
    marks exactly those turns (before, `map(&!@, ...)` made every null turn of InterCode-Python a failure)."""
    document = json.loads(data.read_text(encoding="utf-8"))
    expected = [not valid if valid is not None else observation.startswith("Error executing action")
                for record in document.values()
                for valid, observation in zip(record["turn_history"]["valid_action"],
                                              record["turn_history"]["observations"], strict=True)]
    assert 0 < sum(expected) < len(expected)
    trajectories = list(iter_mapped(data, SAMPLES["intercode_bash"].mapping))
    marked = [step.is_error for t in trajectories for step in t.steps if step.kind == "tool_result"]
    assert marked == expected
