"""Per-item cost on the job runner (issue 40 item 4): a verdict line's ``tokens.calls`` is the HTTP requests the
server counted (a retried 500 included, every window of a segment judge), a replay from the verdict cache says
what the judge read as the first line did, each line's ``tokens.usd`` is its tokens times the model's price
(``--price`` or litellm's cost map) and the summary gives the total and the mean per item or says the price is
unknown, and ``--cost-budget USD`` stops a run before the cap (exit 5) and resumes. Against the fake
OpenAI-compatible server on 127.0.0.1 (its usage: `fake_server.estimate_tokens`)."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.apply.budget import prompt_bound
from rubricforge_dspy.apply.pricing import CostBudget, Price, map_price, price_of
from rubricforge_dspy.apply.stream import run_judge_file
from rubricforge_dspy.apply.writer import judge_inputs
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import EXIT_BUDGET, BudgetExhausted, InputError
from rubricforge_dspy.core.verdict import read_verdicts
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, system_text
from tests.support.batch import assert_one_line_per_id, by_text, fake_lm, read_lines, write_generic_jsonl
from tests.support.long_episodes import write_long_episodes

MAX_TOKENS = 200


def segments_answer(body: dict, n: int) -> dict:
    """A segment judge's window reader notes nothing; its verdict passes."""
    if "overview" in system_text(body):
        return {"reason": "[1] the task was done", "passed": True, "score": 0.9}
    return {"findings": "none"}


def test_calls_are_the_requests_the_server_counted_a_retried_500_and_every_window(tmp_path):
    data = tmp_path / "d.jsonl"
    write_generic_jsonl(data, 1)
    with FakeOpenAI(lambda body, n: "http_500" if n == 0 else by_text(body, n)) as fake:
        summary = run_judge_file(TrajectoryJudge(), data, tmp_path / "a.jsonl", lm=fake_lm(fake), cache=False,
                                 progress=False, concurrency=1, backoff=0.0)
        served = fake.n_requests
    (line,) = read_lines(tmp_path / "a.jsonl")
    assert served == 2 and line["attempts"] == 2 and line["tokens"]["calls"] == served
    assert summary.requests_sent == served
    # a segment judge: its windows and its verdict are requests, and so is a window the server answered with a 500
    long = tmp_path / "long.jsonl"
    write_long_episodes(long, 1, 30)
    judge = SegmentsJudge(render_config=RenderConfig(max_tokens=1500))
    with FakeOpenAI(lambda body, n: "http_500" if n == 1 else segments_answer(body, n)) as fake:
        summary = run_judge_file(judge, long, tmp_path / "b.jsonl", lm=fake_lm(fake), cache=False, progress=False,
                                 concurrency=1, backoff=0.0)
        served = fake.n_requests
    (line,) = read_lines(tmp_path / "b.jsonl")
    assert not line["abstained"] and line["attempts"] == 2  # the 500 failed the first attempt, the second passed
    assert served > 10 and line["tokens"]["calls"] == served == summary.requests_sent
    assert summary.stage_tokens["judge"]["calls"] == served
    assert line["tokens"]["prompt"] == fake.usage["prompt_tokens"]


def test_a_replay_from_the_verdict_cache_says_what_the_judge_read(tmp_path):
    long = tmp_path / "long.jsonl"
    write_long_episodes(long, 2, 30)
    judge = SegmentsJudge(render_config=RenderConfig(max_tokens=1500))
    cache = tmp_path / "cache"
    with FakeOpenAI(segments_answer) as fake:
        run_judge_file(judge, long, tmp_path / "a.jsonl", lm=fake_lm(fake), cache=cache, progress=False)
        asked = fake.n_requests
        again = run_judge_file(judge, long, tmp_path / "b.jsonl", lm=fake_lm(fake), cache=cache, progress=False)
        assert fake.n_requests == asked  # the second run asked nothing
    assert again.cached == 2
    first, replayed = read_verdicts(tmp_path / "a.jsonl"), read_verdicts(tmp_path / "b.jsonl")
    for ident, line in first.items():
        assert line["evidence"]["read"] == "segments" and line["evidence"]["steps"] == 30
        assert replayed[ident]["evidence"] == line["evidence"]
        assert replayed[ident]["tokens"] == {"prompt": 0, "completion": 0, "calls": 0, "cached": True}
    assert again.evidence == {"complete": 0, "cut": 2, "unknown": 0, "cut_share": 1.0}


def test_each_line_costs_its_tokens_times_the_price_and_the_summary_totals_them(tmp_path):
    data = tmp_path / "d.jsonl"
    write_generic_jsonl(data, 5)
    price = Price.parse("2.5,10")
    with FakeOpenAI(by_text) as fake:
        summary = run_judge_file(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), cache=False,
                                 progress=False, price=price)
        served = fake.usage
    lines = read_lines(tmp_path / "v.jsonl")
    for line in lines:
        tokens = line["tokens"]
        assert tokens["usd"] == pytest.approx((tokens["prompt"] * 2.5 + tokens["completion"] * 10) / 1e6, abs=1e-9)
    total = (served["prompt_tokens"] * 2.5 + served["completion_tokens"] * 10) / 1e6
    assert summary.cost["usd"] == pytest.approx(total, abs=1e-8) and summary.cost["items"] == 5
    assert summary.cost["per_item"] == pytest.approx(total / 5, abs=1e-8)
    assert f"cost: ${summary.cost['usd']:,.6g} (5 LM-judged item(s)" in summary.format()
    assert "$2.5 / $10 per million prompt / completion tokens (--price)" in summary.format()


def test_a_hosted_model_is_priced_from_litellms_cost_map(tmp_path):
    known = map_price("openai/gpt-4o-mini")
    assert known is not None and known.source == "litellm's cost map: gpt-4o-mini" and known.prompt > 0
    assert map_price("openai/a-model-served-here") is None and price_of("x", Price(1, 2)) == Price(1, 2)
    data = tmp_path / "d.jsonl"
    write_generic_jsonl(data, 2)
    with FakeOpenAI(by_text, model="gpt-4o-mini") as fake:
        summary = run_judge_file(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), cache=False,
                                 progress=False)
    for line in read_lines(tmp_path / "v.jsonl"):
        tokens = line["tokens"]
        assert tokens["usd"] == known.usd(tokens["prompt"], tokens["completion"]) > 0
    assert summary.price["source"] == known.source and "litellm's cost map: gpt-4o-mini" in summary.format()


def test_an_unknown_price_is_said_never_a_quiet_zero(tmp_path):
    data = tmp_path / "d.jsonl"
    write_generic_jsonl(data, 2)
    with FakeOpenAI(by_text) as fake:
        summary = run_judge_file(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), cache=False,
                                 progress=False)
    assert all("usd" not in line["tokens"] for line in read_lines(tmp_path / "v.jsonl"))
    assert summary.cost == {"unknown": "openai/fake-judge"}
    assert "cost unknown: no price for openai/fake-judge (give --price IN,OUT" in summary.format()
    assert "cost: $" not in summary.format()


def one_call_cost(data, price: Price, attempts: int = 1) -> float:
    """The worst case one call reserves: its prompt's bound and the answer's cap, every attempt, at `price`."""
    judge = TrajectoryJudge()
    bound = max(prompt_bound(judge, judge_inputs(judge, t)) for t in data)
    return price.usd(bound * attempts, MAX_TOKENS * attempts)


def test_the_cost_budget_stops_before_the_cap_and_a_larger_one_judges_only_the_rest(tmp_path):
    from tests.support.helpers import make_dataset

    data = make_dataset(10)
    out = tmp_path / "v.jsonl"
    price = Price.parse("3,15")
    cap = 1.5 * one_call_cost(data, price)  # room for one worst case and a half: a few calls fit, not 10
    with FakeOpenAI(by_text) as fake:
        lm = fake_lm(fake)
        lm.kwargs["max_tokens"] = MAX_TOKENS
        with pytest.raises(BudgetExhausted, match="stopped before the cost budget") as stopped:
            run_judge_file(TrajectoryJudge(), _jsonl(tmp_path, data), out, lm=lm, concurrency=2, max_retries=0,
                           progress=False, cache=False, price=price, cost_budget=cap)
        first = fake.n_requests
        spent = price.usd(fake.usage["prompt_tokens"], fake.usage["completion_tokens"])
        budget = stopped.value.summary.cost_budget
        assert 0 < first < 10 and spent <= cap and budget["stopped"] and budget["cap_usd"] == cap
        assert budget["spent_usd"] == pytest.approx(spent, abs=1e-9)
        assert "re-run the same command with a larger --cost-budget" in str(stopped.value)
        lines = read_lines(out)
        assert len(lines) == first and sum(line["tokens"]["usd"] for line in lines) == pytest.approx(spent, abs=1e-8)
        run_judge_file(TrajectoryJudge(), _jsonl(tmp_path, data), out, lm=lm, max_retries=0, progress=False,
                       cache=False, price=price, cost_budget=100 * cap)
        assert fake.n_requests == 10  # the re-run asked only for the items the first did not judge
    assert_one_line_per_id(out, [t.id for t in data])


def test_a_cost_budget_without_a_price_or_answer_cap_is_refused_before_any_call(tmp_path):
    data = tmp_path / "d.jsonl"
    write_generic_jsonl(data, 2)
    with FakeOpenAI(by_text) as fake:
        lm = fake_lm(fake)
        del lm.kwargs["max_tokens"]
        with pytest.raises(InputError, match="no max_tokens"):
            run_judge_file(TrajectoryJudge(), data, tmp_path / "a.jsonl", lm=lm, progress=False, cost_budget=1.0,
                           price=Price(1, 1))
        lm.kwargs["max_tokens"] = MAX_TOKENS
        with pytest.raises(InputError, match=r"no price for 'openai/fake-judge'.*give --price IN,OUT"):
            run_judge_file(TrajectoryJudge(), data, tmp_path / "b.jsonl", lm=lm, progress=False, cost_budget=1.0)
        assert fake.n_requests == 0


def test_cost_budget_arithmetic_is_the_token_budgets_in_picodollars():
    budget = CostBudget(0.01, Price(1.0, 4.0))  # $1 / $4 per million tokens
    first = budget.reserve(2000, 500)  # $0.002 + $0.002
    with pytest.raises(BudgetExhausted, match="cost budget of \\$0.01"):
        budget.reserve(5000, 1000)  # $0.005 + $0.004: with the first in flight, it would cross the cap
    budget.settle(first, {"prompt_tokens": 1000, "completion_tokens": 100})  # $0.0014 spent
    assert budget.spent == pytest.approx(0.0014) and budget.units.reserved == 0
    second = budget.reserve(0, 0, either=2000)  # a judge's own bound, at the higher price: $0.008
    budget.settle(second, None)  # no usage reported: the whole reservation is spent
    assert budget.spent == pytest.approx(0.0094) and budget.to_dict()["unreported_calls"] == 1
    with pytest.raises(InputError):
        CostBudget(0, Price(1, 1))
    with pytest.raises(InputError, match="IN,OUT"):
        Price.parse("0.15")


def test_cli_price_cost_budget_exit_5_and_resume(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    ids = write_generic_jsonl(data, 6)
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(by_text) as fake:
        base = ["judge", "--data", str(data), "--out", str(out), "--api-base", fake.url + "/v1", "--model",
                "fake-judge", "--max-tokens", str(MAX_TOKENS), "--no-cache", "--price", "1,4"]
        # a call reserves ~$0.018 (three attempts of its prompt bound and --max-tokens) and spends ~$0.001
        assert main([*base, "--cost-budget", "0.021"]) == EXIT_BUDGET == 5
        err = capsys.readouterr().err
        assert "stopped: stopped before the cost budget of $0.021 would be crossed" in err
        first = fake.n_requests
        assert 0 < first < 6 and len(read_lines(out)) == first
        assert Price(1, 4).usd(fake.usage["prompt_tokens"], fake.usage["completion_tokens"]) <= 0.021
        assert main([*base, "--cost-budget", "10"]) == 0
        assert fake.n_requests == 6
        err = capsys.readouterr().err
        assert "cost budget: spent $" in err and "cost: $" in err and "($1 / $4 per million" not in err
        assert "$1 / $4 per million prompt / completion tokens (--price)" in err
        assert main(["judge", "--data", str(data), "--out", str(tmp_path / "w.jsonl"), "--api-base",
                     fake.url + "/v1", "--model", "fake-judge", "--no-cache", "--limit", "1"]) == 0
        assert "cost unknown: no price for openai/fake-judge (give --price IN,OUT" in capsys.readouterr().err
    assert_one_line_per_id(out, ids)
    with pytest.raises(SystemExit) as exited:
        main(["judge", "--data", str(data), "--out", str(out), "--price", "cheap"])
    assert exited.value.code == 2


def _jsonl(tmp_path, trajectories):
    from tests.support.records import write_labeled_jsonl

    path = tmp_path / "items.jsonl"
    if not path.exists():
        write_labeled_jsonl(path, trajectories)
    return path


def test_the_line_schema_takes_usd():
    from rubricforge_dspy.core.verdict import VerdictLineError, check_line, token_usage

    line = {"id": "a", "passed": True, "score": 0.9, "abstained": False, "tokens": token_usage(10, 2, 1, usd=0.5)}
    assert check_line(json.loads(json.dumps(line)), "x:1")["tokens"]["usd"] == 0.5
    with pytest.raises(VerdictLineError, match="usd"):
        check_line({**line, "tokens": {"prompt": 1, "completion": 1, "calls": 1, "usd": -1}}, "x:1")
    with pytest.raises(ValueError):
        token_usage(1, 1, 1, usd=float("nan"))
