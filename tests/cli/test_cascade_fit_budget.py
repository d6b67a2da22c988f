"""`cascade fit --token-budget N` and `--cost-budget USD`: every LM call the fit's LLM stages make on the calibration
items is reserved before it is sent (`lm.budgeted.BudgetedLM` around the judge LM, the one reservation rule); the fit
stops before the cap (exit 5), writes no cascade and says what it spent; a budget large enough fits and records
its spending in the fit report. Refusals come before any request. Against the fake OpenAI server on 127.0.0.1, the
LLM stage a frozen seed judge after the shipped webshop set's floor."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import EXIT_BUDGET
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.cascade import REWARD_ABOVE_0
from tests.support.certify_data import frozen_program

UNSURE = {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}  # decides nothing: dropped
MAX_TOKENS = 128
IN, OUT = 2.0, 7.0


@pytest.fixture
def fit(halves, tmp_path):
    judge, _ = frozen_program(tmp_path)
    out = tmp_path / "cascade.json"

    def argv(fake: FakeOpenAI, *extra: str) -> list[str]:
        return ["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", str(judge), "--data",
                str(halves / "cal.jsonl"), "--order-data", str(halves / "train.jsonl"), *REWARD_ABOVE_0,
                "--alpha", "0.2", "--delta", "0.1", "--out", str(out),
                "--concurrency", "2", "--api-base", fake.api_base, "--model", fake.model, "--max-tokens",
                str(MAX_TOKENS), *extra]
    return argv, out


def test_the_fit_stops_before_its_token_cap_writes_no_cascade_and_a_larger_cap_fits(fit, capsys):
    argv, out = fit
    with FakeOpenAI(lambda body, n: UNSURE) as fake:
        assert main(argv(fake, "--token-budget", "30000")) == EXIT_BUDGET
        err = capsys.readouterr().err
        first = fake.n_requests
        spent = fake.usage["prompt_tokens"] + fake.usage["completion_tokens"]
        assert 0 < first < 500 and 0 < spent <= 30000, err
        assert "stopped: stopped before the token budget of 30,000" in err and f"spent {spent:,} of 30,000" in err
        assert "no cascade was written" in err and "keeps no verdicts" in err and "Traceback" not in err
        assert not out.exists()
        before = dict(fake.usage)
        assert main(argv(fake, "--token-budget", "100000000")) == 0
        asked = fake.n_requests - first
        spent = sum(fake.usage.values()) - sum(before.values())
    # one call per ordering and per calibration item (250 each): the fit keeps no verdicts, so it asks for all again
    assert asked == 500
    printed = capsys.readouterr()
    assert f"token budget: spent {spent:,} of 100,000,000 tokens (judge LM {spent:,} in 500 call(s))" in printed.err
    report = json.loads(out.read_text())
    budget = next(value for key, value in _walk(report) if key == "budget")
    assert budget["spent"] == spent and budget["calls"] == 500 and not budget["stopped"]


def test_the_fit_stops_before_its_dollar_cap_and_says_the_cost(fit, capsys):
    argv, out = fit
    with FakeOpenAI(lambda body, n: UNSURE) as fake:
        cap = 0.5  # a call may cost up to about $0.05 (three attempts at its worst case)
        assert main(argv(fake, "--price", f"{IN},{OUT}", "--cost-budget", str(cap))) == EXIT_BUDGET
        err = capsys.readouterr().err
        usd = (fake.usage["prompt_tokens"] * IN + fake.usage["completion_tokens"] * OUT) / 1e6
        assert 0 < fake.n_requests < 500 and 0 < usd <= cap, err
        assert "stopped: stopped before the cost budget of $0.5" in err and "no cascade was written" in err
        assert not out.exists()
        before = dict(fake.usage)
        assert main(argv(fake, "--price", f"{IN},{OUT}", "--cost-budget", "10")) == 0
        usd = ((fake.usage["prompt_tokens"] - before["prompt_tokens"]) * IN
               + (fake.usage["completion_tokens"] - before["completion_tokens"]) * OUT) / 1e6
    err = capsys.readouterr().err
    assert f"cost budget: spent ${usd:,.6g} of $10" in err
    assert f"cost: ${usd:,.6g} (the fit's LM calls, ${usd / 500:,.6g} per judge call (500))" in err


def test_a_fit_without_a_price_says_the_cost_is_unknown(fit, capsys):
    argv, out = fit
    with FakeOpenAI(lambda body, n: UNSURE) as fake:
        assert main(argv(fake)) == 0
    assert f"cost unknown: no price for openai/{fake.model} (give --price IN,OUT" in capsys.readouterr().err


def test_budgets_are_refused_before_any_request(fit, halves, tmp_path, capsys):
    argv, out = fit
    with FakeOpenAI(lambda body, n: UNSURE) as fake:
        assert main(argv(fake, "--cost-budget", "1")) == 2  # a served model litellm's cost map does not know
        assert "--cost-budget needs the judge LM's price" in capsys.readouterr().err
        assert main(argv(fake, "--cost-budget", "1", "--token-budget", "1000")) == 2
        assert "not both" in capsys.readouterr().err
        assert fake.n_requests == 0
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--data", str(halves / "cal.jsonl"),
                 *REWARD_ABOVE_0, "--alpha", "0.2", "--out", str(tmp_path / "c.json"), "--token-budget", "10"]) == 2
    assert "no --stage calls an LM" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "c.json").exists()


def _walk(value, key=None):
    """Every (key, value) pair of a JSON document, depth first."""
    yield key, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)
