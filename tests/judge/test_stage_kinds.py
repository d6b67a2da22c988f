"""The stage-kind registry (issue 42 item 3): a new stage kind is one module plus one registration
(tests/judge/toy_stage_kind.py), or one entry point of a third-party package; the cascade fits with it
(`fit_cascade`, `cascade fit --stage toy:...`), runs it (`Cascade.batch`, `judge --cascade`) and saves and
reloads it; a third-party kind that cannot load is skipped with one warning naming it, and a command naming it
exits 2."""

from __future__ import annotations

import json
import warnings

import pytest

import rubricforge_dspy.judge.stage_kinds as registry
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import Cascade
from rubricforge_dspy.judge.loading import load_judge, stage_from_spec
from rubricforge_dspy.judge.stage_kinds import StageKindError, StageKindWarning, register_stage_kind, stage_kinds
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from rubricforge_dspy.trust.cascade import FitOptions, fit_cascade
from tests.judge.toy_stage_kind import KIND, InlineAnswers
from tests.support.cascade import REWARD_ABOVE_0, lines_of


def answers_file(halves, path):
    """Another tool's answers on the calibration half: right on every item, none on every tenth (handed on)."""
    items = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))
    path.write_text(json.dumps({"kind": KIND, "answers": {t.id: bool(t.label) for i, t in enumerate(items)
                                                            if i % 10 != 3}}))
    return items, path


def test_a_toy_kind_fits_runs_saves_and_reloads_in_the_library(halves, tmp_path):
    items, answers = answers_file(halves, tmp_path / "answers.json")
    stage = stage_from_spec(f"toy:{answers}")
    assert isinstance(stage, InlineAnswers) and not stage.calls_lm and stage.gives_judge_verdicts
    cascade = fit_cascade([load_judge(halves / "floor.json"), stage], items,
                          FitOptions(0.05, 0.1, method="holm", bound="pooled"))
    assert [rule.name for rule in cascade.rules][-1] == "toy" and isinstance(cascade.stages[-1], InlineAnswers)
    assert cascade.fit_report["judge_verdicts"]["stages"] == ["toy"]
    verdicts = cascade.batch(items)
    by_toy = [(v, t) for v, s, t in zip(verdicts, verdicts.stages, items, strict=True) if s == "toy"]
    assert by_toy and all(v.passed == bool(t.label) for v, t in by_toy)
    cascade.save(tmp_path / "cascade.json")
    saved = json.loads((tmp_path / "cascade.toy.json").read_text())
    assert saved["kind"] == KIND  # the stage saved itself (not as a Python stage by import path)
    again = load_judge(tmp_path / "cascade.json")
    assert isinstance(again, Cascade) and isinstance(again.stages[-1], InlineAnswers)
    assert list(again.batch(items).stages) == list(verdicts.stages)


def test_a_toy_kind_from_the_command_line_fits_and_judges(halves, tmp_path, capsys):
    _, answers = answers_file(halves, tmp_path / "answers.json")
    out = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", f"toy:{answers}",
                 "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.05", "--bound", "pooled",
                 "--method", "holm", "--out", str(out)]) == 0, capsys.readouterr()
    judged = tmp_path / "v.jsonl"
    with FakeOpenAI() as fake:
        assert main(["judge", "--cascade", str(out), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--out", str(judged), "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        assert fake.n_requests == 0
    assert "toy" in {line["stage"] for line in lines_of(judged)}


def test_a_kind_is_registered_once_and_checked():
    with pytest.raises(StageKindError, match="registered already"):
        register_stage_kind(KIND, load=lambda data, path, **_: None)
    with pytest.raises(StageKindError, match="prefix 'toy:'"):
        register_stage_kind("toy.other", prefix="toy:", from_spec=lambda spec, **_: None)
    with pytest.raises(StageKindError, match="give load"):
        register_stage_kind("toy.nothing")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A third-party distribution in a tmp folder on sys.path, with three stage-kind entry points: a good one,
    one whose module does not exist, one whose factory raises SystemExit(0)."""
    dist = tmp_path / "site" / "toy_stage_kinds-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-stage-kinds\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[rubricforge.stage_kinds]\n"
        "toyep = tests.judge.toy_stage_kind:entry_point_kind\n"
        "broken = rubricforge_no_such_module_42:KIND\n"
        "exits = tests.judge.toy_stage_kind:exiting_factory\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    monkeypatch.setattr(registry, "_SKIPPED", {})
    monkeypatch.setattr(registry, "_DISCOVERED", False)


def test_an_entry_point_adds_a_kind_and_a_broken_one_is_skipped_once(plugins, halves, tmp_path):
    with pytest.warns(StageKindWarning) as caught:
        names = {kind.name: kind for kind in stage_kinds()}
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert "'broken'" in messages[0] and "toy-stage-kinds 0.1" in messages[0]
    assert "'exits'" in messages[1] and "SystemExit" in messages[1]
    assert "entry point 'toyep'" in names["toy.entry_point_answers"].origin
    _, answers = answers_file(halves, tmp_path / "answers.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", StageKindWarning)  # once per entry point: no second warning
        assert isinstance(stage_from_spec(f"toyep:{answers}"), InlineAnswers)
        with pytest.raises(StageKindError, match="'broken'.*skipped"):
            stage_from_spec("broken:anything")


def test_a_command_naming_a_skipped_kind_exits_2(plugins, halves, tmp_path, capsys):
    with pytest.warns(StageKindWarning):
        code = main(["cascade", "fit", "--stage", "exits:x", "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                     "--alpha", "0.05", "--out", str(tmp_path / "c.json")])
    assert code == 2
    assert "'exits'" in capsys.readouterr().err


def test_the_stage_attributes_are_declared_on_the_contract(halves):
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.trust.cascade import stage_cost, stage_levels, stage_names

    assert (BaseJudge.stage_name, BaseJudge.cost_per_item, BaseJudge.confidence_levels, BaseJudge.kind) == \
        ("judge", 1.0, None, None)
    floor, judge = load_judge(halves / "floor.json"), TrajectoryJudge()
    assert (floor.stage_name, floor.cost_per_item, floor.calls_lm, floor.gives_judge_verdicts) == \
        ("floor", 0.0, False, False)
    assert (judge.calls_lm, judge.gives_judge_verdicts) == (True, True)
    toy = InlineAnswers({})
    assert stage_names([floor, toy, judge]) == ["floor", "toy", "judge"]
    assert [stage_cost(s) for s in (floor, toy, judge)] == [0.0, 1.0, 1.0] and stage_levels(toy) == (0.0, 1.0)


@pytest.mark.parametrize("bad", [{"alpha": float("nan")}, {"delta": 1.0}, {"max_false_pass": -0.1}])
def test_fit_options_refuse_a_bound_outside_0_1(bad):
    from rubricforge_dspy.core.errors import InputError

    with pytest.raises(InputError, match=next(iter(bad))):
        FitOptions(**{"alpha": 0.1, "delta": 0.1, **bad})
