"""`induce --cost-budget USD` (and `RubricInducer(token_budget=CostBudget(...))`): the induction's hard cap in US
dollars is the token budget counted in picodollars (`lm.pricing.CostBudget`), reserved by the same `BudgetedLM` at
each LM's price: GEPA's judge and reflection calls, the validation pass and the job's certification. The run stops
with `BudgetExhausted` (exit 5) before the cap, writes no program, and says what each LM cost; an LM without a
price is refused before any call. Offline with scripted LMs that report the worst usage a byte-level tokenizer
could (`tests.support.budget.WorstCaseLM`), and through the command line against the fake OpenAI server."""

from __future__ import annotations

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import EXIT_BUDGET, BudgetExhausted, InputError
from rubricforge_dspy.induction.inducer import InductionConfig, induce
from rubricforge_dspy.lm.pricing import CostBudget, Price
from rubricforge_dspy.pipeline.induce_job import induction_split, run_induce_job
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.budget import WorstCaseLM
from tests.support.helpers import make_dataset
from tests.support.induction import make_reflection_lm, scripted_judge
from tests.support.induction_http import is_reflection, reflection_reply, rubric_judge
from tests.support.records import jsonl_record, write_lines

JUDGE_TOKENS, REFLECTION_TOKENS = 200, 1000
PRICE = Price(2.0, 7.0)  # USD per million prompt / completion tokens: the two differ, so a mix-up shows


@pytest.fixture(scope="module")
def split():
    return induction_split(make_dataset(30), seed=0)


def worst_case_lms():
    reflection = make_reflection_lm([])
    return (WorstCaseLM(scripted_judge, model="worst-judge", max_tokens=JUDGE_TOKENS, num_retries=0),
            WorstCaseLM(reflection.respond, model="worst-reflection", max_tokens=REFLECTION_TOKENS, num_retries=0))


def usd_of(lm: WorstCaseLM, answer: int) -> float:
    """What `lm`'s calls cost at `PRICE`: each reported its prompt's bytes and `answer` completion tokens."""
    return (sum(lm.prompt_bytes) * PRICE.prompt + answer * len(lm.prompt_bytes) * PRICE.completion) / 1e6


def test_the_induction_stops_before_its_dollar_cap_writes_nothing_and_says_what_each_lm_cost(split, tmp_path):
    config = InductionConfig(budget=60, minibatch=3, num_threads=4)
    judge_lm, reflection_lm = worst_case_lms()
    whole = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                   token_budget=CostBudget(1000.0, PRICE))
    total = usd_of(judge_lm, JUDGE_TOKENS) + usd_of(reflection_lm, REFLECTION_TOKENS)
    report = whole.token_budget
    assert report["spent_usd"] == pytest.approx(total, abs=1e-9) and not report["stopped"]
    assert report["by_lm"]["judge"]["usd"] == pytest.approx(usd_of(judge_lm, JUDGE_TOKENS), abs=1e-9)
    for k, cap in enumerate((total / 40, total / 4, total / 2, 0.9 * total)):
        judge_lm, reflection_lm = worst_case_lms()
        out = tmp_path / f"p{k}.json"
        with pytest.raises(BudgetExhausted) as stopped:
            induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                   token_budget=CostBudget(cap, PRICE), out_path=out)
        used = usd_of(judge_lm, JUDGE_TOKENS) + usd_of(reflection_lm, REFLECTION_TOKENS)
        assert 0 < used <= cap  # the cap, costed from what the LMs reported
        assert not out.exists()
        message = str(stopped.value)
        assert "stopped before the cost budget of $" in message and f"spent ${used:,.6g} of ${cap:,.6g}" in message
        assert "judge LM $" in message and "no program written" in message and "--cost-budget" in message


def test_an_lm_without_a_price_is_refused_before_any_call(split):
    judge_lm, reflection_lm = worst_case_lms()
    # the budget prices the judge's model; the reflection LM is another model litellm's cost map does not know
    with pytest.raises(InputError, match="no price for 'worst-reflection'"):
        induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm,
               config=InductionConfig(budget=60, minibatch=3), token_budget=CostBudget(10.0, PRICE, "worst-judge"))
    assert judge_lm.prompt_bytes == [] and reflection_lm.prompt_bytes == []


def test_the_job_costs_its_certification_on_the_same_budget(split, tmp_path):
    judge_lm, reflection_lm = worst_case_lms()
    budget = CostBudget(1000.0, PRICE, "worst-judge")
    budget.price_for = lambda model: PRICE  # the reflection LM at the same price (a served model, one --price)
    job = run_induce_job(split, tmp_path / "p.json", judge_lm=judge_lm, reflection_lm=reflection_lm,
                         config=InductionConfig(budget=60, minibatch=3, num_threads=1), token_budget=budget)
    report = job.token_budget
    assert job.certificate is not None and report["other"] > 0  # the certification's calls, on the same budget
    total = usd_of(judge_lm, JUDGE_TOKENS) + usd_of(reflection_lm, REFLECTION_TOKENS)
    assert report["spent_usd"] == pytest.approx(budget.spent, abs=1e-9) and budget.spent <= 1000.0
    assert budget.spent == pytest.approx(total, rel=0.05)  # the certification's lines: the job runner's usage
    assert "cost budget: spent $" in job.summary() and "certification $" in job.summary()


def test_rubricforge_induce_stops_at_its_cost_budget_with_exit_5_against_a_server(tmp_path, capsys):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.json"
    write_lines(data, [jsonl_record(i, reward=float(i % 2)) for i in range(24)])
    with FakeOpenAI(lambda body, n: reflection_reply(body) if is_reflection(body) else rubric_judge(body)) as server:
        base = ["induce", "--data", str(data), "--out", str(out), "--budget", "30", "--api-base", server.api_base,
                "--model", server.model, "--timeout", "10"]
        assert main([*base, "--cost-budget", "5"]) == 2  # no price for a served model: refused before any call
        assert "--cost-budget needs the judge LM's price" in capsys.readouterr().err and server.n_requests == 0
        assert main([*base, "--cost-budget", "5", "--token-budget", "1000"]) == 2
        assert "not both" in capsys.readouterr().err and server.n_requests == 0

        assert main([*base, "--price", "2,7", "--cost-budget", "100"]) == 0
        err = capsys.readouterr().err
        total = (server.usage["prompt_tokens"] * 2 + server.usage["completion_tokens"] * 7) / 1e6
        assert f"cost budget: spent ${total:,.6g} of $100" in err and "reflection LM $" in err
        assert f"cost: ${total:,.6g} (the job's LM calls, $" in err and "per judge call" in err
        out.unlink()

        before = dict(server.usage)
        assert main([*base, "--price", "2,7", "--cost-budget", f"{total:.9f}"]) == EXIT_BUDGET
        err = capsys.readouterr().err
        spent = ((server.usage["prompt_tokens"] - before["prompt_tokens"]) * 2
                 + (server.usage["completion_tokens"] - before["completion_tokens"]) * 7) / 1e6
        assert 0 < spent <= total, err
        assert "stopped: stopped before the cost budget" in err and "no program written" in err
        assert "Traceback" not in err and not out.exists()


def test_induce_says_the_cost_is_unknown_without_a_price(tmp_path, capsys):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.json"
    write_lines(data, [jsonl_record(i, reward=float(i % 2)) for i in range(24)])
    with FakeOpenAI(lambda body, n: reflection_reply(body) if is_reflection(body) else rubric_judge(body)) as server:
        assert main(["induce", "--data", str(data), "--out", str(out), "--budget", "30", "--api-base",
                     server.api_base, "--model", server.model, "--timeout", "10"]) == 0
    assert f"cost unknown: no price for openai/{server.model} (give --price IN,OUT" in capsys.readouterr().err
