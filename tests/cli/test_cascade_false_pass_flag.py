"""`cascade fit --false-pass among-passes`: the per-stage bound on the share of a stage's passes that are failures
(the option metrics.risk_control offers beside the default, among the failed items a stage decides) reaches the fit
from the command line and is recorded in the saved cascade's guarantee."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from tests.support.cascade import REWARD_ABOVE_0


def fit(halves, out, *extra):
    return main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(halves / "cal.jsonl"),
                 *REWARD_ABOVE_0, "--alpha", "0.3", "--out", str(out), *extra])


def guarantee(out):
    return json.loads(out.read_text(encoding="utf-8"))["rubricforge"]["guarantee"]


@pytest.mark.parametrize(("flag", "rate"), [((), "among_failed"), (("--false-pass", "among-passes"), "among_passes")])
def test_the_bounded_false_pass_rate_is_chosen_on_the_command_line_and_recorded(halves, tmp_path, capsys, flag, rate):
    out = tmp_path / "cascade.json"
    assert fit(halves, out, *flag) == 0, capsys.readouterr()
    recorded = guarantee(out)
    assert recorded["bound"] == "per_stage" and recorded["false_pass_rate"] == rate
    beta = recorded["max_false_pass"]
    assert beta == pytest.approx(0.3 if rate == "among_passes" else 0.15)  # beta's default follows the rate


def test_an_unknown_false_pass_rate_is_refused(halves, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        fit(halves, tmp_path / "c.json", "--false-pass", "among-everything")
    assert stopped.value.code == 2 and "among-passes" in capsys.readouterr().err


def test_a_refusal_under_the_default_rate_names_the_other_rate(halves, tmp_path, capsys):
    """A per-stage refusal with the default false-pass rate (among the failed items) says that the rate over the
    passes exists; one under that rate does not repeat it."""
    code = fit(halves, tmp_path / "c.json", "--alpha", "0.01")
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert code != 0 and "cascade fit refused" in text
    assert "--false-pass among-passes" in text
    code = fit(halves, tmp_path / "d.json", "--alpha", "0.01", "--false-pass", "among-passes")
    printed = capsys.readouterr()
    assert code != 0 and "--false-pass among-passes bounds" not in printed.out + printed.err
