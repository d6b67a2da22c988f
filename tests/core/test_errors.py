"""One exception hierarchy and what the command line does with it: bad input exits 2, an unusable
server 3, a bug 1 with its traceback; one circuit breaker; one transient-error rule."""

from __future__ import annotations

import inspect
from pathlib import Path

import httpx
import pytest
from dspy.utils.exceptions import AdapterParseError

from rubricforge_dspy.cli import main as cli_main
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError, RubricForgeError, RubricForgeWarning, ServerError
from rubricforge_dspy.judge.module import TrajectoryVerdictSignature, VerdictFormatError
from rubricforge_dspy.lm.budgeted import BudgetStop
from rubricforge_dspy.lm.circuit import CircuitOpen, JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.errors import error_kind, is_outage, is_transient
from rubricforge_dspy.serve.process import free_port
from tests.support.extras import import_every_module, refused_for_a_missing_extra

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def _package_classes():
    """Every class defined in a module of the package (the testing helpers included), by walking them. A
    module that imports an extra that is not installed is left out (tests/test_optional_extras.py)."""
    found = {}
    modules, failed = import_every_module()
    assert all(refused_for_a_missing_extra(name, error) for name, error in failed.items()), failed
    for module in modules.values():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_and_warning_of_the_package_has_one_root():
    classes = _package_classes()
    exceptions = {name: cls for name, cls in classes.items() if issubclass(cls, BaseException)}
    assert len(exceptions) >= 20  # the walk found the package's exceptions
    warnings = {name for name, cls in exceptions.items() if issubclass(cls, Warning)}
    assert warnings and all(issubclass(exceptions[name], RubricForgeWarning) for name in warnings)
    outside = sorted(name for name, cls in exceptions.items()
                     if name not in warnings and not issubclass(cls, RubricForgeError))
    # CircuitOpen and BudgetStop alone are BaseExceptions on purpose: they must escape GEPA's `except Exception`
    # (a dead server, a spent budget), and whoever runs the LM turns them into a RubricForgeError.
    assert outside == ["rubricforge_dspy.lm.budgeted.BudgetStop", "rubricforge_dspy.lm.circuit.CircuitOpen"]
    assert not issubclass(CircuitOpen, Exception) and not issubclass(BudgetStop, Exception)


def test_second_bases_keep_except_valueerror_and_runtimeerror_working():
    assert issubclass(InputError, ValueError) and issubclass(ServerError, RuntimeError)
    assert issubclass(JudgeUnavailableError, ServerError)
    # GEPA relies on the strict judge's format failure being DSPy's AdapterParseError.
    assert issubclass(VerdictFormatError, AdapterParseError) and issubclass(VerdictFormatError, RubricForgeError)


def test_a_missing_data_file_exits_2_naming_the_file(tmp_path, capsys):
    missing = tmp_path / "nowhere.jsonl"
    assert main(["stats", "--data", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(missing) in err and "Traceback" not in err


def test_an_existing_output_exits_2_naming_it(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    assert main(["convert", "--data", str(AIRLINE), "--out", str(out)]) == 2
    assert str(out) in capsys.readouterr().err and out.read_text() == "keep me\n"


def test_verbose_prints_the_traceback_of_an_input_error(tmp_path, capsys):
    missing = tmp_path / "nowhere.jsonl"
    assert main(["-v", "stats", "--data", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and f"error: {missing}" in err


def test_a_judge_against_a_closed_port_exits_3(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    argv = ["judge", "--data", str(AIRLINE), "--limit", "4", "--out", str(tmp_path / "v.jsonl"), "--model", "m@r",
            "--concurrency", "1", "--max-consecutive-errors", "2", "--api-base", url]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "error: JudgeUnavailableError" in err and url in err and "Traceback" not in err


def test_an_unexpected_error_is_a_bug_with_its_traceback_and_exit_1(monkeypatch, capsys):
    def broken(args):
        raise KeyError("internal")

    monkeypatch.setattr(cli_main, "cmd_stats", broken)
    assert main(["stats", "--data", str(AIRLINE)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'internal'" in err


def test_a_valueerror_that_is_not_an_input_error_is_a_bug_not_bad_input(monkeypatch, capsys):
    def broken(args):
        raise ValueError("an internal invariant")

    monkeypatch.setattr(cli_main, "cmd_stats", broken)
    assert main(["stats", "--data", str(AIRLINE)]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_ctrl_c_exits_130(monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "cmd_stats", interrupted)
    assert main(["stats", "--data", str(AIRLINE)]) == 130


def _failing(error):
    def call():
        raise error
    return call


def test_the_circuit_counts_outages_not_answers_and_opens_at_its_limit():
    circuit = LMCircuit(3, "http://x/v1", advice="Fix it.")
    parse = VerdictFormatError("parse", TrajectoryVerdictSignature, "not json", "no json")
    for _ in range(2):
        with pytest.raises(ConnectionError):
            circuit.call(_failing(ConnectionError("refused")))
    with pytest.raises(VerdictFormatError):
        circuit.call(_failing(parse))  # an answer: resets the count
    assert circuit.consecutive == 0 and circuit.total == 2
    for _ in range(2):
        with pytest.raises(ConnectionError):
            circuit.call(_failing(ConnectionError("refused")))
    with pytest.raises(CircuitOpen) as opened:
        circuit.call(_failing(ConnectionError("refused")))
    assert "http://x/v1 failed 3 consecutive calls" in str(opened.value) and "Fix it." in str(opened.value)
    with pytest.raises(CircuitOpen):
        circuit.call(lambda: "never called")
    with pytest.raises(JudgeUnavailableError, match="ConnectionError: refused"):
        circuit.raise_if_open()


def test_a_circuit_without_limit_never_opens():
    circuit = LMCircuit(None, "e", advice="")
    for _ in range(50):
        circuit.failure("HTTP 500")
    circuit.raise_if_open()
    assert circuit.consecutive == 50


def test_one_transient_rule_for_lm_and_batch_api_errors():
    request = httpx.Request("GET", "http://x/v1/batches/b")

    def status(code):
        return httpx.HTTPStatusError("", request=request, response=httpx.Response(code, request=request))

    assert [error_kind(status(c)) for c in (429, 500, 503, 400, 404)] == [
        "rate_limit", "http_5xx", "http_5xx", "http_4xx", "http_4xx"]
    assert is_transient(httpx.ConnectError("refused")) and is_transient(httpx.ReadTimeout("slow"))
    assert is_transient(status(502)) and is_transient(status(429)) and not is_transient(status(401))
    cut = VerdictFormatError("truncated", TrajectoryVerdictSignature, "{", "cut")
    assert is_outage(status(401)) and not is_outage(cut)
