"""The command line is a thin shell (issue 27, items 4 and 5): commands raise where they find a problem and one
table in `cli.main` turns the package's errors into exit codes; what a command prints is the text of a library
record; configurations nest instead of copying fields."""

from __future__ import annotations

import ast
import dataclasses
import json
import warnings
from pathlib import Path

import pytest

from rubricforge_dspy.cli import main as cli_main
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import AnswerIsNo, InputError, ServerError
from tests.support.helpers import BUNDLED, make_dataset, make_trajectory

CLI = Path(cli_main.__file__).parent
AIRLINE = BUNDLED / "tau_bench_official" / "gpt-4o-airline.json"


def test_no_command_returns_an_error_s_exit_code_itself():
    """Every ``return`` in cli/ gives 0, a variable or a call: never a literal 1, 2, 3 or 4, nor an EXIT_
    constant, outside `main` and `_run` (its body: the one place that maps errors to codes)."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            if path.name == "main.py" and function.name in {"main", "_run", "_bug"}:
                continue
            for node in ast.walk(function):
                value = node.value if isinstance(node, ast.Return) else None
                if isinstance(value, ast.Constant) and value.value not in (0, None, True, False):
                    found.append(f"{path.name}:{node.lineno} {function.name} returns {value.value!r}")
                if isinstance(value, ast.Name) and value.id.startswith("EXIT_"):
                    found.append(f"{path.name}:{node.lineno} {function.name} returns {value.id}")
    assert found == []


@pytest.mark.parametrize("error, code, line", [
    (InputError("bad --flag"), 2, "error: bad --flag"),
    (ServerError("down"), 3, "error: ServerError: down"),
    (AnswerIsNo("keep the baseline"), 4, "no: keep the baseline"),
])
def test_main_maps_each_error_class_to_its_exit_code_and_one_line(monkeypatch, capsys, error, code, line):
    def command(args):
        raise error

    monkeypatch.setattr(cli_main, "cmd_stats", command)
    assert main(["stats", "--data", str(AIRLINE)]) == code
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == line and "Traceback" not in err


def test_render_index_out_of_range_is_bad_input_named_by_main(capsys):
    assert main(["render", "--data", str(AIRLINE), "--index", "100000"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --index 100000 out of range (0..")


def test_gate_without_its_inputs_is_bad_input(capsys):
    assert main(["gate", "--candidate-verdicts", "a.jsonl"]) == 2
    assert "error: give --candidate-verdicts and --baseline-verdicts together" in capsys.readouterr().err


def test_data_stats_counts_a_stream_as_the_stats_command_prints_it(capsys):
    from rubricforge_dspy.data.formats import LoadReport, load_trajectories
    from rubricforge_dspy.data.stats import DataStats

    trajectories = make_dataset(6) + [make_trajectory(99, success=True, task="t0", agent="other")]
    trajectories[-1] = dataclasses.replace(trajectories[-1], label=None)
    stats = DataStats()
    for t in trajectories:
        stats.add(t)
    counts = stats.to_dict(LoadReport())
    assert (counts["trajectories"], counts["unlabeled"], counts["positives"], counts["tasks"]) == (7, 1, 3, 6)
    # the mean reward is over the trajectories that have one (the unlabeled one too: its reward is 1)
    assert counts["agents"] == ["other", "test-agent"] and counts["mean_reward"] == round(4 / 7, 4)
    assert counts["tool_errors"] == sum(t.n_tool_errors for t in trajectories) > 0
    assert stats.format(LoadReport()).splitlines()[0] == " trajectories: 7"

    assert main(["stats", "--data", str(AIRLINE), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    loaded = load_trajectories(AIRLINE)  # the same file, counted from the full records
    assert printed["trajectories"] == len(loaded) and printed["positives"] == sum(t.label for t in loaded)
    assert printed["tasks"] == len({(t.domain, t.task_id) for t in loaded})


def test_show_prints_the_library_s_description_of_a_program(tmp_path, capsys):
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.trust.certificate import describe_program

    program = tmp_path / "p.json"
    TrajectoryJudge().save(str(program))
    text = describe_program(program)
    assert text.splitlines()[0] == f"program: {program}" and "certificate: none" in text
    assert main(["show", str(program)]) == 0
    assert capsys.readouterr().out.strip() == text


def test_the_old_token_constants_still_import_with_a_deprecation_warning():
    from rubricforge_dspy.core.errors import RubricForgeDeprecationWarning
    from rubricforge_dspy.evidence.render import DEFAULT_RENDER_TOKENS, RenderConfig
    from rubricforge_dspy.lm.config import DEFAULT_COMPLETION_TOKENS, LMConfig

    assert LMConfig().max_tokens == DEFAULT_COMPLETION_TOKENS and RenderConfig().max_tokens == DEFAULT_RENDER_TOKENS
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from rubricforge_dspy.evidence.render import DEFAULT_MAX_TOKENS as render_tokens
        from rubricforge_dspy.lm.config import DEFAULT_MAX_TOKENS as completion_tokens
    assert (completion_tokens, render_tokens) == (DEFAULT_COMPLETION_TOKENS, DEFAULT_RENDER_TOKENS)
    assert [w.category for w in caught] == [RubricForgeDeprecationWarning] * 2  # a DeprecationWarning too
    assert issubclass(RubricForgeDeprecationWarning, DeprecationWarning)


def test_the_circuit_limits_are_defined_once():
    from rubricforge_dspy.cli.main import build_parser
    from rubricforge_dspy.core.presets import INDUCTION_MAX_CONSECUTIVE_LM_ERRORS, JUDGING_MAX_CONSECUTIVE_LM_ERRORS
    from rubricforge_dspy.induction import InductionConfig

    assert InductionConfig().max_consecutive_lm_errors == INDUCTION_MAX_CONSECUTIVE_LM_ERRORS
    args = build_parser().parse_args(["judge", "--data", "d", "--out", "o"])
    assert args.max_consecutive_errors == JUDGING_MAX_CONSECUTIVE_LM_ERRORS


@pytest.mark.slow
def test_the_protocol_induces_with_every_setting_of_its_induction_config(tmp_path):
    """`ProtocolConfig` holds an `InductionConfig`: a setting the old hand mapping dropped (here the
    calibration method) reaches the induction and the frozen program, and run.json records it."""
    from rubricforge_dspy.induction import InductionConfig
    from rubricforge_dspy.pipeline.protocol import ProtocolConfig, run_protocol
    from rubricforge_dspy.program.store import read_program
    from rubricforge_dspy.testing.scripted import ScriptedLM
    from tests.support.induction import make_reflection_lm, scripted_judge

    config = ProtocolConfig(induction=InductionConfig(budget=20, minibatch=2, calibration="isotonic"), ablation=False)
    run_dir = run_protocol(make_dataset(20), tmp_path / "run", judge_lm=ScriptedLM(scripted_judge, model="j"),
                           reflection_lm=make_reflection_lm([]), judge_lm_name="j", reflection_lm_name="r",
                           program_path=tmp_path / "p.json", dataset="synthetic", config=config)
    assert read_program(tmp_path / "p.json")["rubricforge"]["calibration"]["method"] == "isotonic"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["induction"]["calibration"] == "isotonic" and run["config"]["induction"]["budget"] == 20
