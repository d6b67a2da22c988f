"""`certify` and `label-next` take ``--price IN,OUT`` and ``--cost-budget USD`` as `judge` does: the judging run's
calls are costed at the price and each reserves its worst case in dollars first (`lm.pricing.CostBudget`, through
the job runner); a run stops before the cap (exit 5) keeping its verdicts in ``--verdicts-out``, and the same
command with a larger budget judges only the rest. Without a price or ``--verdicts-out`` the budget is refused before
any call; the summary says the cost, or that it is unknown. Against the fake OpenAI server."""

from __future__ import annotations

import pytest

from rubricforge_dspy.apply.budget import prompt_bound
from rubricforge_dspy.apply.writer import judge_inputs
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import EXIT_BUDGET
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.batch import read_lines
from tests.support.certify_data import frozen_program, held_out, lenient_verdict
from tests.support.records import write_labeled_jsonl

MAX_TOKENS = 256
IN, OUT = 2.0, 7.0  # USD per million prompt / completion tokens


def usd(usage: dict[str, int]) -> float:
    return (usage["prompt_tokens"] * IN + usage["completion_tokens"] * OUT) / 1e6


def one_call_usd(items) -> float:
    """A call's worst case in dollars: its prompt's bound at the prompt price and --max-tokens at the completion
    price, three attempts (the job's default retries)."""
    bound = max(prompt_bound(TrajectoryJudge(), judge_inputs(TrajectoryJudge(), t)) for t in items)
    return 3 * (bound * IN + MAX_TOKENS * OUT) / 1e6


@pytest.fixture
def setup(tmp_path):
    path, _ = frozen_program(tmp_path)
    items = held_out()
    data = tmp_path / "held_out.jsonl"
    write_labeled_jsonl(data, items)
    return path, items, data


def test_certify_stops_at_the_cost_budget_keeps_its_verdicts_and_a_larger_budget_certifies(setup, tmp_path, capsys):
    from rubricforge_dspy.program.store import MANIFEST_KEY, read_program

    path, items, data = setup
    verdicts = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        base = ["certify", str(path), "--data", str(data), "--resamples", "200", "--api-base", fake.api_base,
                "--model", fake.model]
        refusals = (([*base, "--max-tokens", str(MAX_TOKENS), "--price", f"{IN},{OUT}", "--cost-budget", "1"],
                     "--cost-budget needs --verdicts-out"),
                    ([*base, "--max-tokens", str(MAX_TOKENS), "--verdicts-out", str(verdicts), "--cost-budget", "1"],
                     "needs the judge LM's price"))
        for argv, said in refusals:
            assert main(argv) == 2
            assert said in capsys.readouterr().err and fake.n_requests == 0
        assert not verdicts.exists() or read_lines(verdicts) == []
        with_out = [*base, "--max-tokens", str(MAX_TOKENS), "--verdicts-out", str(verdicts), "--price", f"{IN},{OUT}"]
        cap = 2 * one_call_usd(items)  # two calls in flight at most, each reserving three attempts
        assert main([*with_out, "--cost-budget", f"{cap:.9f}"]) == EXIT_BUDGET
        err = capsys.readouterr().err
        assert "stopped: stopped before the cost budget of $" in err
        first = fake.n_requests
        assert 0 < first < len(items) and len(read_lines(verdicts)) == first
        assert usd(fake.usage) <= cap
        assert "certificate" not in (read_program(path)[MANIFEST_KEY] or {})
        assert main([*with_out, "--cost-budget", "100"]) == 0
        assert fake.n_requests == len(items)  # the re-run judged only the rest
        err = capsys.readouterr().err
    assert "certificate" in read_program(path)[MANIFEST_KEY]
    rest = len(items) - first
    assert "cost: $" in err and f"({rest} LM-judged item(s), $" in err and "per item) at $2 / $7 per million" in err
    assert "cost budget: spent $" in err and "of $100" in err


def test_certify_says_the_cost_is_unknown_without_a_price(setup, tmp_path, capsys):
    path, items, data = setup
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        assert main(["certify", str(path), "--data", str(data), "--resamples", "200", "--api-base", fake.api_base,
                     "--model", fake.model]) == 0
    assert f"cost unknown: no price for openai/{fake.model} (give --price IN,OUT" in capsys.readouterr().err


def test_label_next_stops_at_the_cost_budget_and_a_larger_budget_ranks_with_nothing_judged_twice(setup, tmp_path,
                                                                                                  capsys):
    path, items, data = setup
    verdicts = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        base = ["label-next", "--program", str(path), "--data", str(data), "-k", "3", "--api-base", fake.api_base,
                "--model", fake.model, "--max-tokens", str(MAX_TOKENS), "--price", f"{IN},{OUT}"]
        assert main([*base, "--out", str(tmp_path / "a.jsonl"), "--cost-budget", "1"]) == 2
        assert "--cost-budget needs --verdicts-out" in capsys.readouterr().err and fake.n_requests == 0
        with_out = [*base, "--verdicts-out", str(verdicts)]
        cap = 2 * one_call_usd(items)  # two calls in flight at most, each reserving three attempts
        assert main([*with_out, "--out", str(tmp_path / "b.jsonl"), "--cost-budget", f"{cap:.9f}"]) == EXIT_BUDGET
        first = fake.n_requests
        assert 0 < first < len(items) and len(read_lines(verdicts)) == first and usd(fake.usage) <= cap
        assert not (tmp_path / "b.jsonl").exists()
        assert main([*with_out, "--out", str(tmp_path / "c.jsonl"), "--cost-budget", "100"]) == 0
        assert fake.n_requests == len(items)
    assert len(read_lines(tmp_path / "c.jsonl")) == 3
    assert "per item) at $2 / $7 per million" in capsys.readouterr().err


def test_price_and_cost_budget_are_refused_where_nothing_is_judged_or_with_recheck(setup, tmp_path, capsys):
    path, items, data = setup
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        assert main(["label-next", "--verdicts", str(tmp_path / "none.jsonl"), "--data", str(data), "--out",
                     str(tmp_path / "x.jsonl"), "--price", "1,1"]) == 2
        assert "--price goes with the LM calls of judging --program" in capsys.readouterr().err
        assert main(["certify", str(path), "--data", str(data), "--recheck", "--api-base", fake.api_base,
                     "--model", fake.model, "--cost-budget", "1"]) == 2
        assert "--cost-budget goes with certifying a program" in capsys.readouterr().err
        assert fake.n_requests == 0
