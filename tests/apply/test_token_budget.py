"""`--token-budget` (issue 40 item 4): a run stops before its cap would be crossed (`BudgetExhausted`, exit 5),
keeps what it judged, and a re-run with a larger cap judges only the rest; the cap holds under concurrency
(each call reserves its worst case first); tokens per item and per stage in the summary. Offline with a
scripted LM (its usage: `fake_server.estimate_tokens`), and against the fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import random
import threading

import pytest

from rubricforge_dspy.apply.budget import Reservation, TokenBudget, prompt_bound
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.apply.writer import judge_inputs
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import EXIT_BUDGET, BudgetExhausted, InputError
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from tests.support.batch import assert_one_line_per_id, by_text, fake_lm, read_lines, verdict_of, write_generic_jsonl
from tests.support.helpers import make_dataset

MAX_TOKENS = 200


def scripted(max_tokens: int | None = MAX_TOKENS, asked: list[str] | None = None) -> ScriptedLM:
    """A scripted judge LM; `asked` collects the user text of every request (the run's copies included)."""
    def respond(messages):
        text = last_user_text(messages)
        if asked is not None:
            asked.append(text)
        return verdict_of(text)

    return ScriptedLM(respond, model="scripted-judge", max_tokens=max_tokens)


def one_call_bound(data) -> int:
    judge = TrajectoryJudge()
    return max(prompt_bound(judge, judge_inputs(judge, t)) for t in data) + MAX_TOKENS


def test_a_small_cap_stops_before_it_keeps_lines_and_a_larger_cap_judges_only_the_rest(tmp_path):
    data = make_dataset(12)
    out = tmp_path / "v.jsonl"
    asked: list[str] = []
    lm = scripted(asked=asked)
    cap = 3 * one_call_bound(data)  # room for 3 worst cases: fewer than 12 calls fit
    with pytest.raises(BudgetExhausted) as stopped:
        judge_stream(TrajectoryJudge(), data, out, lm=lm, concurrency=2, max_retries=0, progress=False,
                     token_budget=cap)
    summary = stopped.value.summary
    budget = summary.token_budget
    assert budget["stopped"] and budget["cap"] == cap and 0 < budget["spent"] <= cap
    assert budget["spent"] == summary.tokens["prompt_tokens"] + summary.tokens["completion_tokens"]
    kept = read_lines(out)
    assert 0 < len(kept) < 12 and len(kept) == summary.judged == budget["calls"]
    assert "re-run the same command with a larger --token-budget" in str(stopped.value)
    first_calls = len(asked)

    again = scripted(asked=asked)
    done = judge_stream(TrajectoryJudge(), data, out, lm=again, max_retries=0, progress=False,
                        token_budget=100 * cap)
    assert done.resumed == len(kept) and done.judged == 12 - len(kept)
    assert first_calls == len(kept) and len(asked) == 12 == len(set(asked))  # nothing judged twice
    assert not done.token_budget["stopped"] and done.token_budget["spent"] <= 100 * cap
    assert_one_line_per_id(out, [t.id for t in data])


def test_the_cap_is_never_crossed_under_concurrency(tmp_path):
    data = make_dataset(40)
    bound = one_call_bound(data)
    for k, cap in enumerate((bound, 2 * bound + 7, 5 * bound, 9 * bound)):
        out = tmp_path / f"v{k}.jsonl"
        with pytest.raises(BudgetExhausted) as stopped:
            judge_stream(TrajectoryJudge(), data, out, lm=scripted(), concurrency=8, max_retries=0, progress=False,
                         token_budget=cap)
        summary = stopped.value.summary
        used = summary.tokens["prompt_tokens"] + summary.tokens["completion_tokens"]
        assert used <= cap and summary.token_budget["spent"] == used
        assert len(read_lines(out)) == summary.judged >= 1


def test_a_budget_shared_by_threads_never_admits_more_than_its_cap():
    budget = TokenBudget(10_000)
    admitted: list[int] = []
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(200):
            size = rng.randint(1, 400)
            try:
                reservation = budget.reserve(size)
            except BudgetExhausted:
                continue
            with lock:
                admitted.append(size)
            budget.settle(reservation, None)  # no usage reported: the whole reservation is spent

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.reserved == 0 and budget.spent == sum(admitted) <= 10_000
    assert budget.stopped and budget.unreported == len(admitted)


def test_settle_spends_what_the_lm_reported_and_refuses_a_bad_cap():
    budget = TokenBudget(100)
    reservation = budget.reserve(60)
    with pytest.raises(BudgetExhausted, match="60 reserved"):
        budget.reserve(41)
    budget.settle(reservation, {"prompt_tokens": 20, "completion_tokens": 5})
    assert (budget.spent, budget.reserved, budget.left, budget.overruns) == (25, 0, 75, 0)
    budget.settle(budget.reserve(10), {"prompt_tokens": 11, "completion_tokens": 0})  # a wrong bound: counted
    assert (budget.spent, budget.overruns) == (36, 1)
    budget = TokenBudget(100)
    budget.settle(budget.reserve(25), {"prompt_tokens": 20, "completion_tokens": 5})
    budget.release(budget.reserve(75))
    assert budget.reserved == 0 and isinstance(budget.reserve(75), Reservation)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InputError):
            TokenBudget(bad)


def test_a_cap_too_small_for_one_call_says_the_smallest_that_fits_and_writes_nothing(tmp_path):
    data = make_dataset(3)
    out = tmp_path / "v.jsonl"
    asked: list[str] = []
    with pytest.raises(BudgetExhausted, match="cannot pay for one call: a call may take up to") as stopped:
        judge_stream(TrajectoryJudge(), data, out, lm=scripted(asked=asked), max_retries=0, progress=False,
                     token_budget=50)
    assert asked == [] and stopped.value.summary.judged == 0 and (not out.exists() or read_lines(out) == [])
    smallest = stopped.value.summary.token_budget["refused_reservation"]
    assert smallest == one_call_bound(data[:1])


def test_a_budget_needs_a_cap_on_each_answer(tmp_path):
    with pytest.raises(InputError, match="max_tokens"):
        judge_stream(TrajectoryJudge(), make_dataset(2), tmp_path / "v.jsonl", lm=scripted(None), progress=False,
                     token_budget=10**6)


def test_tokens_per_item_and_per_stage_in_the_summary(tmp_path):
    data = make_dataset(6)
    summary = judge_stream(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=scripted(), progress=False)
    per_item, stage = summary.tokens_per_item, summary.stage_tokens["judge"]
    total = summary.tokens["prompt_tokens"] + summary.tokens["completion_tokens"]
    assert per_item["items"] == 6 and per_item["mean"] == pytest.approx(total / 6, abs=0.1)
    assert per_item["p50"] <= per_item["p95"] <= per_item["max"]
    assert (stage["prompt_tokens"], stage["completion_tokens"], stage["calls"]) == (
        summary.tokens["prompt_tokens"], summary.tokens["completion_tokens"], 6)
    assert summary.to_dict()["tokens_per_item"] == per_item and "tokens per item (6 LM-judged)" in summary.format()


# -- against the fake OpenAI server (it reports usage) ---------------------------------------------------------

def test_fake_server_stop_and_resume_with_nothing_judged_twice(tmp_path):
    data = make_dataset(10)
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(by_text) as fake:
        lm = fake_lm(fake)
        lm.kwargs["max_tokens"] = MAX_TOKENS
        cap = 4 * one_call_bound(data)
        with pytest.raises(BudgetExhausted) as stopped:
            judge_stream(TrajectoryJudge(), data, out, lm=lm, concurrency=3, max_retries=0, progress=False,
                         token_budget=cap)
        first = fake.n_requests
        spent = fake.usage["prompt_tokens"] + fake.usage["completion_tokens"]
        assert 0 < first < 10 and spent <= cap and stopped.value.summary.token_budget["spent"] == spent
        lines = read_lines(out)
        assert len(lines) == first  # each line's tokens are what its call reported: they add up to the spend
        assert sum(line["tokens"]["prompt"] + line["tokens"]["completion"] for line in lines) == spent
        judge_stream(TrajectoryJudge(), data, out, lm=lm, max_retries=0, progress=False, token_budget=50 * cap)
        assert fake.n_requests == 10  # the re-run asked only for the items the first did not judge
    assert_one_line_per_id(out, [t.id for t in data])


def test_cli_exit_5_keeps_lines_and_a_larger_budget_finishes(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    ids = write_generic_jsonl(data, 8)
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(by_text) as fake:
        base = ["judge", "--data", str(data), "--out", str(out), "--api-base", fake.url + "/v1",
                "--model", "fake-judge", "--max-tokens", str(MAX_TOKENS), "--no-cache"]
        # the server preset renders up to 22,000 tokens: a call's worst case is ~16,000 (three attempts)
        assert main([*base, "--token-budget", "40000"]) == EXIT_BUDGET == 5
        err = capsys.readouterr().err
        assert "stopped: stopped before the token budget of 40,000 would be crossed" in err
        first = fake.n_requests
        assert 0 < first < 8 and len(read_lines(out)) == first
        assert fake.usage["prompt_tokens"] + fake.usage["completion_tokens"] <= 40000
        assert main([*base, "--token-budget", "10000000"]) == 0
        assert fake.n_requests == 8
    assert_one_line_per_id(out, ids)


def test_cli_refuses_a_budget_with_the_batch_api_and_a_bad_number(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    write_generic_jsonl(data, 2)
    with FakeOpenAI(by_text) as fake:
        assert main(["judge", "--data", str(data), "--out", str(tmp_path / "v.jsonl"), "--api-base",
                     fake.url + "/v1", "--model", "fake-judge", "--batch-api", "--token-budget", "1000"]) == 2
        assert fake.n_requests == 0
    assert "--token-budget is enforced by local runs only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["judge", "--data", str(data), "--out", str(tmp_path / "v.jsonl"), "--token-budget", "0"])
    assert exited.value.code == 2


def test_certify_stops_at_the_budget_keeps_its_verdicts_and_a_larger_budget_certifies(tmp_path, capsys):
    from rubricforge_dspy.program.store import MANIFEST_KEY, read_program
    from tests.support.certify_data import frozen_program, held_out, lenient_verdict
    from tests.support.records import write_labeled_jsonl

    path, _ = frozen_program(tmp_path)
    items = held_out()
    data = tmp_path / "held_out.jsonl"
    write_labeled_jsonl(data, items)
    verdicts = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        base = ["certify", str(path), "--data", str(data), "--resamples", "200", "--api-base", fake.api_base,
                "--model", fake.model, "--max-tokens", str(MAX_TOKENS)]
        assert main([*base, "--token-budget", "1000"]) == 2  # no --verdicts-out: refused before any call
        assert "--token-budget needs --verdicts-out" in capsys.readouterr().err and fake.n_requests == 0
        with_out = [*base, "--verdicts-out", str(verdicts)]
        bound = max(prompt_bound(TrajectoryJudge(), judge_inputs(TrajectoryJudge(), t)) for t in items)
        assert main([*with_out, "--token-budget", str(6 * (bound + MAX_TOKENS))]) == EXIT_BUDGET
        first = fake.n_requests
        assert 0 < first < len(items) and len(read_lines(verdicts)) == first
        assert "certificate" not in (read_program(path)[MANIFEST_KEY] or {})
        assert main([*with_out, "--token-budget", "100000000"]) == 0
        assert fake.n_requests == len(items)  # the re-run judged only the rest
    assert "certificate" in read_program(path)[MANIFEST_KEY]


def test_judge_cascade_stops_at_the_budget_and_a_larger_one_asks_only_for_the_rest(halves, tmp_path, capsys):
    from rubricforge_dspy.judge.cascade import StageRule
    from tests.support.cascade import REWARD_ABOVE_0, lines_of, save_cascade

    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(lambda body, n: {"reason": "The agent bought the item.", "passed": True, "score": 0.9}) as fake:
        base = ["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                "--limit", "60", "--out", str(out), "--concurrency", "2", "--no-cache", "--max-tokens",
                str(MAX_TOKENS), "--api-base", fake.url + "/v1", "--model", "fake-judge"]
        assert main([*base, "--token-budget", "60000"]) == EXIT_BUDGET
        assert "stopped: stopped before the token budget of 60,000" in capsys.readouterr().err
        first = fake.n_requests
        spent = fake.usage["prompt_tokens"] + fake.usage["completion_tokens"]
        kept = lines_of(out)
        assert 0 < first and spent <= 60000 and len([x for x in kept if x["stage"] == "judge"]) == first
        assert main([*base, "--token-budget", "100000000"]) == 0
        asked_again = fake.n_requests - first
    printed = "".join(capsys.readouterr())
    assert "token budget: spent" in printed and "of 100,000,000" in printed and "tokens per item (" in printed
    lines = lines_of(out)
    assert len(lines) == 60 == len({x["id"] for x in lines})
    assert first + asked_again == len([x for x in lines if x["stage"] == "judge"])  # no item asked twice


def test_label_next_stops_at_the_budget_and_a_larger_budget_ranks_with_nothing_judged_twice(tmp_path, capsys):
    from tests.support.certify_data import frozen_program, held_out, lenient_verdict
    from tests.support.records import write_labeled_jsonl

    path, _ = frozen_program(tmp_path)
    items = held_out()
    data = tmp_path / "pool.jsonl"
    write_labeled_jsonl(data, items)
    verdicts = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        base = ["label-next", "--program", str(path), "--data", str(data), "-k", "3", "--api-base", fake.api_base,
                "--model", fake.model, "--max-tokens", str(MAX_TOKENS)]
        assert main([*base, "--out", str(tmp_path / "a.jsonl"), "--token-budget", "1000"]) == 2
        assert "--token-budget needs --verdicts-out" in capsys.readouterr().err and fake.n_requests == 0
        bound = max(prompt_bound(TrajectoryJudge(), judge_inputs(TrajectoryJudge(), t)) for t in items)
        with_out = [*base, "--verdicts-out", str(verdicts)]
        assert main([*with_out, "--out", str(tmp_path / "b.jsonl"), "--token-budget",
                     str(6 * (bound + MAX_TOKENS))]) == EXIT_BUDGET
        first = fake.n_requests
        assert 0 < first < len(items) and len(read_lines(verdicts)) == first
        assert not (tmp_path / "b.jsonl").exists()
        assert main([*with_out, "--out", str(tmp_path / "c.jsonl"), "--token-budget", "100000000"]) == 0
        assert fake.n_requests == len(items)
    assert len(read_lines(tmp_path / "c.jsonl")) == 3


def test_the_batch_api_and_ray_entry_points_refuse_a_budget_before_any_request(tmp_path):
    from rubricforge_dspy.apply.openai_batch import run_batch_api
    from rubricforge_dspy.apply.options import JobOptions

    data = tmp_path / "data.jsonl"
    write_generic_jsonl(data, 2)
    with FakeOpenAI(by_text) as fake:
        with pytest.raises(InputError, match="Batch API run .* cannot enforce a token budget"):
            run_batch_api(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), token_budget=10**6)
        assert fake.n_requests == 0
    with pytest.raises(InputError, match="Ray run"):
        JobOptions(token_budget=10**6).refuse_budget("a Ray run (judge_dataset)")
