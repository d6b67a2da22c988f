"""`lm.budgeted.BudgetedLM`: an LM under a `TokenBudget` reserves each call's worst case before it is sent (the bytes
it sends, the template's allowance, ``max_tokens``, every attempt), settles with the usage the LM reported (the
whole reservation when it reported none, or when the call failed without a report), refuses a call that could
cross the cap with `BudgetStop` (nothing sent), and reads as the LM it wraps (fingerprint, copies, settings)."""

from __future__ import annotations

import copy
import dataclasses
import json
import threading

import dspy
import pytest
from dspy import lm15

from rubricforge_dspy.core.errors import BudgetExhausted, InputError
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.budget import PROMPT_OVERHEAD, TokenBudget
from rubricforge_dspy.lm.budgeted import BudgetedLM, BudgetStop, budget_report, stops_at_budget
from rubricforge_dspy.lm.copies import sized_lm
from rubricforge_dspy.lm.fingerprint import lm_fingerprint
from rubricforge_dspy.testing.scripted import ScriptedEngine, ScriptedLM
from tests.support.budget import WorstCaseLM

VERDICT = {"reason": "ok", "passed": True, "score": 0.9}


def judged(lm, text="[1] USER: hi"):
    with dspy.context(lm=lm):
        return TrajectoryJudge()(trajectory=text)


def test_a_call_spends_what_its_lm_reported_and_never_more_than_it_reserved():
    inner = WorstCaseLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    budget = TokenBudget(10**6)
    lm = BudgetedLM(inner, budget, "judge")
    assert judged(lm).passed
    [sent] = inner.prompt_bytes
    assert budget.spent == sent + 100 and budget.reserved == 0 and budget.overruns == 0
    assert budget_report(budget, [lm])["by_lm"] == {"judge": {"spent": sent + 100, "calls": 1, "unreported_calls": 0}}


def test_the_reservation_is_the_bytes_sent_the_allowance_and_the_answer_for_every_attempt():
    inner = ScriptedLM(lambda messages: VERDICT, max_tokens=100, num_retries=2)
    lm = BudgetedLM(inner, TokenBudget(10**6))
    messages = [{"role": "user", "content": "é" * 10}]
    size = len(json.dumps(messages, ensure_ascii=False).encode("utf-8"))  # é is 2 bytes
    assert lm.bound(None, messages, {}) == (size + PROMPT_OVERHEAD + 100) * 3
    assert lm.bound(None, messages, {"max_tokens": 7, "n": 2}) == (size + PROMPT_OVERHEAD + 7) * 2 * 3


def test_a_call_that_could_cross_the_cap_is_not_sent():
    inner = ScriptedLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    budget = TokenBudget(1000)
    with pytest.raises(BudgetStop, match="cannot pay for one call"):
        judged(BudgetedLM(inner, budget))
    assert inner.calls == 0 and budget.spent == 0 and budget.stopped


class SilentEngine(ScriptedEngine):
    """Answers without reporting usage."""

    def complete(self, request):
        return dataclasses.replace(super().complete(request), usage=lm15.Usage())


def test_an_lm_that_reports_no_usage_or_fails_spends_its_whole_reservation():
    inner = ScriptedLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    inner._engine_spec = SilentEngine(inner)
    budget = TokenBudget(10**6)
    judged(BudgetedLM(inner, budget))
    assert budget.spent > PROMPT_OVERHEAD + 100 and budget.unreported == 1

    def dead(messages):
        raise ConnectionError("the server went away")

    failing = ScriptedLM(dead, max_tokens=100, num_retries=0)
    budget = TokenBudget(10**6)
    lm = BudgetedLM(failing, budget)
    with pytest.raises(Exception, match="went away"):
        judged(lm)
    assert budget.reserved == 0 and budget.unreported == 1 and budget.spent > PROMPT_OVERHEAD + 100
    assert lm.tally.spent == budget.spent and lm.tally.unreported == 1


def test_it_reads_as_the_lm_it_wraps_and_its_copies_share_the_budget():
    inner = ScriptedLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    budget = TokenBudget(10**6)
    lm = BudgetedLM(inner, budget, "judge")
    assert lm_fingerprint(lm) == lm_fingerprint(inner) and lm.model == inner.model and lm.kwargs == inner.kwargs
    assert copy.deepcopy(lm) is lm  # GEPA deep-copies programs: never the budget
    sized = sized_lm(lm, connections=8)
    assert isinstance(sized, BudgetedLM) and sized.budget is budget and sized.tally is lm.tally
    judged(sized)
    assert lm.tally.calls == 1 and budget.calls == 1


def test_an_lm_without_max_tokens_is_refused():
    with pytest.raises(InputError, match="--max-tokens"):
        BudgetedLM(ScriptedLM(lambda messages: VERDICT, max_tokens=None), TokenBudget(10**6))


def test_threads_on_one_budget_never_cross_its_cap():
    inner = WorstCaseLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    one = BudgetedLM(inner, TokenBudget(10**6)).bound(None, [{"role": "user", "content": "x" * 4000}], {})
    cap = 7 * one + 11
    budget = TokenBudget(cap)
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
    used = sum(inner.prompt_bytes) + 100 * len(inner.prompt_bytes)
    assert stopped and 0 < used == budget.spent <= cap and budget.reserved == 0


def test_stops_at_budget_turns_the_stop_into_budget_exhausted_with_what_each_lm_spent():
    inner = WorstCaseLM(lambda messages: VERDICT, max_tokens=100, num_retries=0)
    budget = TokenBudget(10**6)
    judge_lm, other = BudgetedLM(inner, budget, "judge"), BudgetedLM(inner, budget, "reflection")
    judged(judge_lm)
    with pytest.raises(BudgetExhausted) as stopped:
        with stops_at_budget(budget, [judge_lm, other], "nothing was written"):
            raise BudgetStop("the next call may take more")
    message = str(stopped.value)
    assert message.startswith("the next call may take more. spent ")
    assert f"judge LM {budget.spent:,} in 1 call(s), reflection LM 0 in 0 call(s)" in message
    assert message.endswith("nothing was written")
