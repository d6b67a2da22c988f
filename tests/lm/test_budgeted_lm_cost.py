"""`BudgetedLM` under a `lm.pricing.CostBudget`: the one reservation rule counted in picodollars. A call reserves its
prompt's bound at the prompt price and its answer's cap at the completion price, settles what its LM reported at
those prices, and a call that could cross the dollar cap is not sent, at any concurrency; an LM of another model
than the budget's is costed at litellm's cost map's price or refused before any call."""

from __future__ import annotations

import threading

import dspy
import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.budgeted import BudgetedLM, BudgetStop, budget_report, spending
from rubricforge_dspy.lm.pricing import CostBudget, Price, map_price
from tests.support.budget import WorstCaseLM

VERDICT = {"reason": "ok", "passed": True, "score": 0.9}
PRICE = Price(2.0, 7.0)


def judged(lm, text="[1] USER: hi"):
    with dspy.context(lm=lm):
        return TrajectoryJudge()(trajectory=text)


def usd(inner: WorstCaseLM, answer: int, price: Price = PRICE) -> float:
    """What `inner`'s calls cost: each reported its prompt's bytes and `answer` completion tokens."""
    return (sum(inner.prompt_bytes) * price.prompt + answer * len(inner.prompt_bytes) * price.completion) / 1e6


def test_a_call_reserves_its_prompt_and_its_answer_at_their_own_prices_and_spends_what_was_reported():
    inner = WorstCaseLM(lambda messages: VERDICT, max_tokens=100, num_retries=1)
    budget = CostBudget(10.0, PRICE)
    lm = BudgetedLM(inner, budget)
    messages = [{"role": "user", "content": "x" * 1000}]
    prompt, answer = lm.bounds(None, messages, {})
    assert answer == 2 * 100 and prompt + answer == lm.bound(None, messages, {})  # two attempts each
    reservation = budget.reserve(prompt, answer, price=lm.price)
    assert reservation.tokens == pytest.approx((prompt * 2.0 + answer * 7.0) * 1e6, abs=1)
    budget.release(reservation)
    judged(lm)
    assert budget.spent == pytest.approx(usd(inner, 100), abs=1e-12) and budget.reserved == 0
    report = budget_report(budget, [lm])
    assert report["by_lm"]["judge"]["usd"] == pytest.approx(usd(inner, 100), abs=1e-9)
    assert spending(report).startswith(f"spent ${report['spent_usd']:,.6g} of $10 (judge LM $")


def test_threads_on_one_dollar_budget_never_cross_its_cap():
    inner = WorstCaseLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    prompt, answer = BudgetedLM(inner, CostBudget(10.0, PRICE)).bounds(None, [{"role": "user", "content": "x" * 4000}],
                                                                       {})
    cap = 7 * (prompt * PRICE.prompt + answer * PRICE.completion) / 1e6 + 1e-7
    budget = CostBudget(cap, PRICE)
    lm = BudgetedLM(inner, budget)
    stopped = []

    def work():
        for _ in range(10):
            try:
                judged(lm, "[1] USER: " + "x" * 3900)
            except BudgetStop:
                stopped.append(1)
                return

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stopped and 0 < usd(inner, 100) <= cap and budget.spent == pytest.approx(usd(inner, 100), abs=1e-12)
    assert budget.reserved == 0


def test_another_model_is_costed_at_the_cost_map_or_refused_before_any_call():
    budget = CostBudget(10.0, PRICE, model="served-judge")
    unknown = WorstCaseLM(lambda messages: VERDICT, model="no-such-model-anywhere", max_tokens=100, num_retries=0)
    with pytest.raises(InputError, match="no price for 'no-such-model-anywhere'"):
        BudgetedLM(unknown, budget, "reflection")
    assert unknown.prompt_bytes == []
    hosted = map_price("openai/gpt-4o-mini")
    if hosted is None:
        pytest.skip("litellm's model cost map is not installed")
    inner = WorstCaseLM(lambda messages: VERDICT, model="openai/gpt-4o-mini", max_tokens=100, num_retries=0)
    lm = BudgetedLM(inner, budget, "reflection")
    judged(lm)
    assert lm.price == hosted and budget.spent == pytest.approx(usd(inner, 100, hosted), abs=1e-12)
