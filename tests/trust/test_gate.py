"""The promotion gate on verdict files built to known confusion counts (the paper's airline table), and
on two frozen programs judged by a scripted LM."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.rubric import SEED_RUBRIC
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text
from rubricforge_dspy.trust.gate import Paired, decide, false_pass_noninferiority, gate_programs, tango_z
from tests.support.helpers import make_dataset
from tests.support.verdicts import paper_pairing, write_verdicts


def confusion(labels, passed):
    return {"tp": sum(y and p for y, p in zip(labels, passed)), "fp": sum(not y and p for y, p in zip(labels, passed)),
            "fn": sum(y and not p for y, p in zip(labels, passed)),
            "tn": sum(not y and not p for y, p in zip(labels, passed))}


def test_the_paper_pairing_has_the_stated_counts_and_mcnemar_p():
    labels, induced, geval = paper_pairing()
    assert confusion(labels, induced) == {"tp": 2, "fp": 6, "fn": 8, "tn": 46}
    assert confusion(labels, geval) == {"tp": 2, "fp": 9, "fn": 8, "tn": 43}
    result = decide(Paired(tuple(map(str, range(62))), tuple(labels), tuple(induced), tuple(geval)))
    # exact McNemar by hand: 3 discordant items, all favouring the induced judge: 2 * P(X <= 0), X ~ Bin(3, 1/2)
    assert (result.mcnemar_b, result.mcnemar_c) == (3, 0)
    assert result.mcnemar_p == pytest.approx(2 * math.comb(3, 0) * 0.5 ** 3) == pytest.approx(0.25)


def test_gate_passes_the_induced_judge_and_fails_geval_as_a_candidate(tmp_path, capsys):
    labels, induced, geval = paper_pairing()
    a = write_verdicts(tmp_path / "induced.jsonl", labels, induced)
    b = write_verdicts(tmp_path / "geval.jsonl", labels, geval)
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", b]) == 0
    out = capsys.readouterr().out
    assert "**PASS" in out and "| false passes / failed items | 6/52 (0.115) | 9/52 (0.173) |" in out
    assert "p = 0.25." in out
    # G-Eval is worse on false passes: +3/52 = +0.058 > the 0.05 margin.
    assert main(["gate", "--candidate-verdicts", b, "--baseline-verdicts", a]) == 4  # no: its own exit code (1 is a bug's)
    out = capsys.readouterr().out
    assert "**FAIL" in out and "difference +0.058" in out


def test_an_equal_candidate_is_not_worse_and_the_bound_matches_the_test(tmp_path):
    labels, induced, _ = paper_pairing()
    paired = Paired(tuple(map(str, range(62))), tuple(labels), tuple(induced), tuple(induced))
    result = false_pass_noninferiority(paired, margin=0.10, alpha=0.05)
    # b = c = 0: the restricted estimate is 0 and Z = -sqrt(N m / (1 - m)) in closed form.
    assert result.p_value == pytest.approx(stats.norm.cdf(-math.sqrt(52 * 0.10 / 0.90)))
    assert result.shown and result.upper < 0.10
    # The one-sided bound is where the test's p-value is exactly alpha.
    assert stats.norm.cdf(tango_z(0, 0, 52, result.upper)) == pytest.approx(0.05, abs=1e-6)
    a = write_verdicts(tmp_path / "a.jsonl", labels, induced)
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", a, "--margin", "0.10"]) == 0


def test_bad_input_exits_2_naming_the_file(tmp_path, capsys):
    labels, induced, geval = paper_pairing()
    a = write_verdicts(tmp_path / "a.jsonl", labels, induced)
    b = write_verdicts(tmp_path / "b.jsonl", labels[:-1], geval[:-1])
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", b]) == 2
    assert "a.jsonl: 1 item(s) not judged in" in capsys.readouterr().err
    flipped = write_verdicts(tmp_path / "c.jsonl", [1 - y for y in labels], geval)
    assert main(["gate", "--candidate-verdicts", a, "--baseline-verdicts", flipped]) == 2
    assert "disagree on the label of 62 item(s)" in capsys.readouterr().err
    passed_only = write_verdicts(tmp_path / "p.jsonl", [1] * 10, [True] * 10)
    assert main(["gate", "--candidate-verdicts", passed_only, "--baseline-verdicts", passed_only]) == 2
    assert "no failed (label 0) items" in capsys.readouterr().err
    assert main(["gate", "--candidate-verdicts", a]) == 2


STRICT = SEED_RUBRIC + "\nA tool ERROR that is never fixed fails the episode."


def test_gate_judges_two_programs_on_the_same_items(tmp_path):
    def respond(messages):
        failed = "payment method not found" in last_user_text(messages)
        strict = "never fixed fails" in system_text(messages)
        passed = not failed or not strict
        return {"reason": "r", "passed": passed, "score": 0.9 if passed else 0.1}

    strict, lenient = tmp_path / "strict.json", tmp_path / "lenient.json"
    freeze(TrajectoryJudge(STRICT), strict)
    freeze(TrajectoryJudge(SEED_RUBRIC), lenient)
    data = make_dataset(40)
    lm = ScriptedLM(respond)
    result = gate_programs(lenient, strict, data, lm=lm, verdicts_dir=tmp_path / "v")
    assert not result.may_replace and result.false_pass.b == 20 and result.less_accurate
    assert (tmp_path / "v" / "candidate.jsonl").exists()
    assert gate_programs(strict, lenient, data, lm=lm, verdicts_dir=tmp_path / "w").may_replace
