"""`induce --token-budget N`: a hard cap on every LM call of an induction (GEPA's judge and reflection calls, the
validation pass, the testset's pass and the job's certification), each call's worst case reserved first
(`lm.budgeted.BudgetedLM`, the one reservation rule of `lm.budget`). The run stops with `BudgetExhausted` (exit 5)
before the cap would be crossed, writes no program (or, stopped in the certification, an uncertified one, and says
so), and says what each LM spent; a budget large enough changes nothing. Offline with scripted LMs that report the
worst usage a byte-level tokenizer could (`tests.support.budget.WorstCaseLM`), and through the command line against
the fake OpenAI server."""

from __future__ import annotations

import pytest

from rubricforge_dspy.apply.budget import TokenBudget
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import EXIT_BUDGET, BudgetExhausted, InputError
from rubricforge_dspy.data.examples import to_examples
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.induction.inducer import InductionConfig, induce
from rubricforge_dspy.induction.teleprompter import RubricInducer
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.pipeline.induce_job import induction_split, run_induce_job
from rubricforge_dspy.program.store import read_program
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from rubricforge_dspy.testing.scripted import ScriptedLM
from tests.support.budget import WorstCaseLM
from tests.support.helpers import make_dataset
from tests.support.induction import (
    ERROR_CRITERION,
    make_reflection_lm,
    reading_answers,
    scripted_judge,
    scripted_lms,
)
from tests.support.induction_http import is_reflection, reflection_reply, rubric_judge
from tests.support.records import jsonl_record, write_lines

JUDGE_TOKENS, REFLECTION_TOKENS = 200, 1000
RENDER = RenderConfig(max_tokens=600)


@pytest.fixture(scope="module")
def split():
    return induction_split(make_dataset(30), seed=0)


def worst_case_lms():
    """Judge and reflection LMs reporting the worst usage (one attempt per call: no retries)."""
    reflection = make_reflection_lm([])
    return (WorstCaseLM(scripted_judge, model="worst-judge", max_tokens=JUDGE_TOKENS, num_retries=0),
            WorstCaseLM(reflection.respond, model="worst-reflection", max_tokens=REFLECTION_TOKENS, num_retries=0))


def spent_by(lm: WorstCaseLM, answer: int) -> int:
    return sum(lm.prompt_bytes) + answer * len(lm.prompt_bytes)


def test_the_induction_stops_before_its_cap_writes_nothing_and_says_what_each_lm_spent(split, tmp_path):
    config = InductionConfig(budget=60, minibatch=3, num_threads=4)
    judge_lm, reflection_lm = worst_case_lms()
    whole = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                   token_budget=10**9)
    total = whole.token_budget["spent"]
    assert total == spent_by(judge_lm, JUDGE_TOKENS) + spent_by(reflection_lm, REFLECTION_TOKENS)
    stops = 0
    for k, cap in enumerate((total // 40, total // 4, total // 2, (9 * total) // 10)):
        judge_lm, reflection_lm = worst_case_lms()
        out = tmp_path / f"p{k}.json"
        with pytest.raises(BudgetExhausted) as stopped:
            induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                   token_budget=cap, out_path=out)
        stops += 1
        used = spent_by(judge_lm, JUDGE_TOKENS) + spent_by(reflection_lm, REFLECTION_TOKENS)
        assert used <= cap  # the cap, counted from what the LMs reported
        assert not out.exists()
        message = str(stopped.value)
        assert f"spent {used:,} of {cap:,} tokens" in message
        assert f"judge LM {spent_by(judge_lm, JUDGE_TOKENS):,} in {len(judge_lm.prompt_bytes)} call(s)" in message
        assert "no program written" in message and "--token-budget" in message
    assert stops == 4


def test_a_budget_large_enough_changes_nothing(split, tmp_path):
    config = InductionConfig(budget=60, minibatch=3)
    judge_lm, reflection_lm = scripted_lms()
    free = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                  out_path=tmp_path / "free.json")
    judge_lm, reflection_lm = scripted_lms()
    capped = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                    out_path=tmp_path / "capped.json", token_budget=10**8)
    assert ERROR_CRITERION in capped.judge.rubric and capped.beat_seed
    assert capped.judge.rubric == free.judge.rubric and capped.sweep == free.sweep
    assert [v.to_dict() for v in capped.val_verdicts] == [v.to_dict() for v in free.val_verdicts]
    manifests = [read_program(tmp_path / name)["rubricforge"] for name in ("free.json", "capped.json")]
    assert manifests[0]["rubric_sha256"] == manifests[1]["rubric_sha256"]
    # every LM call went through the budget: the judge's (GEPA's and the validation pass's) and the reflection's
    report = capped.token_budget
    assert report["by_lm"]["judge"]["calls"] == judge_lm.calls and report["by_lm"]["reflection"]["calls"] == \
        reflection_lm.calls >= 1
    assert report["spent"] == sum(entry["spent"] for entry in report["by_lm"].values()) and not report["stopped"]


def test_the_testset_pass_of_compile_is_under_the_budget_too(split):
    judge_lm, reflection_lm = scripted_lms()
    inducer = RubricInducer(reflection_lm=reflection_lm, budget=60, minibatch=3, token_budget=10**8)
    student = TrajectoryJudge()
    student.set_lm(judge_lm)
    compiled = inducer.compile(student, trainset=to_examples(split.train), valset=to_examples(split.val),
                               testset=to_examples(split.test))
    result = compiled.detailed_results
    assert len(result.test_verdicts) == len(split.test)
    assert result.token_budget["by_lm"]["judge"]["calls"] == judge_lm.calls  # GEPA's, validation's and test's
    assert compiled.predictors()[0].lm is judge_lm  # the compiled judge keeps the student's own LM, unwrapped


def test_an_lm_without_max_tokens_is_refused_before_any_call(split):
    judge_lm, reflection_lm = scripted_lms()
    uncapped = ScriptedLM(scripted_judge, model="uncapped", max_tokens=None)
    with pytest.raises(InputError, match="needs a cap on each answer.*max-tokens"):
        induce(split.train, split.val, judge_lm=uncapped, reflection_lm=reflection_lm,
               config=InductionConfig(budget=60, minibatch=3), token_budget=10**8)
    assert uncapped.calls == 0 and reflection_lm.calls == 0


class RecordingBudget(TokenBudget):
    """A budget that records, for each reservation, the cap it needed: spent + reserved + the reservation."""

    def __init__(self, cap):
        super().__init__(cap)
        self.needed = []

    def reserve(self, tokens):
        self.needed.append(self.spent + self.reserved + tokens)
        return super().reserve(tokens)


def test_the_job_budgets_its_certification_and_a_stop_there_leaves_an_uncertified_program_and_says_so(split,
                                                                                                  tmp_path):
    config = InductionConfig(budget=60, minibatch=3, num_threads=1)  # one call at a time: the same order each run

    def scripted_lms():  # one attempt a call: the induction's reservations are one worst case each
        return (ScriptedLM(scripted_judge, model="scripted-judge", num_retries=0),
                ScriptedLM(make_reflection_lm([]).respond, model="scripted-reflection", num_retries=0))

    judge_lm, reflection_lm = scripted_lms()
    budget = RecordingBudget(10**9)
    job = run_induce_job(split, tmp_path / "p.json", judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                         token_budget=budget)
    report = job.token_budget
    induced = sum(entry["calls"] for entry in report["by_lm"].values())
    assert report["other"] > 0 and report["calls"] == induced + len(split.test)  # the certification's calls
    assert report["spent"] == budget.spent and job.certificate is not None
    assert "token budget: spent" in job.summary() and "certification" in job.summary()
    cap = max(budget.needed[:induced])  # enough for the induction, not for the first certification call
    assert budget.needed[induced] > cap

    judge_lm, reflection_lm = scripted_lms()
    out = tmp_path / "q.json"
    with pytest.raises(BudgetExhausted) as stopped:
        run_induce_job(split, out, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config, token_budget=cap)
    message = str(stopped.value)
    assert f"The program {out} is written" in message and "NOT certified" in message
    assert "certification" in message and "rubricforge certify" in message
    assert "certificate" not in read_program(out)["rubricforge"]


def test_rubricforge_induce_stops_at_its_token_budget_with_exit_5_against_a_server(tmp_path, capsys):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.json"
    write_lines(data, [jsonl_record(i, reward=float(i % 2)) for i in range(24)])
    with FakeOpenAI(lambda body, n: reflection_reply(body) if is_reflection(body) else rubric_judge(body)) as server:
        base = ["induce", "--data", str(data), "--out", str(out), "--budget", "30", "--api-base", server.api_base,
                "--model", server.model, "--timeout", "10"]
        assert main([*base, "--token-budget", "100000000"]) == 0
        err = capsys.readouterr().err
        assert "token budget: spent " in err and "judge LM " in err and "reflection LM " in err
        total = sum(server.usage.values())
        assert f"spent {total:,} of 100,000,000 tokens" in err  # what the server counted, every call
        out.unlink()

        before = dict(server.usage)
        cap = total  # what the whole run spent: its worst cases (bytes, every attempt) do not all fit
        assert main([*base, "--token-budget", str(cap)]) == EXIT_BUDGET
        err = capsys.readouterr().err
        spent = sum(server.usage.values()) - sum(before.values())
        assert 0 < spent <= cap, err
        assert "stopped: stopped before the token budget" in err and "judge LM " in err and "no program written" in err
        assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("make", [lambda: SegmentsJudge(render_config=RENDER, overlap=2),
                                  lambda: ExplorerJudge(max_iters=4, render_config=RENDER)],
                         ids=["segments", "explorer"])
def test_a_reading_judges_induction_is_under_the_budget_call_by_call(make):
    """A segments or explorer judge makes several calls per item: each is reserved (and counted) on its own."""
    split = split_by_task(make_dataset(24), seed=0)
    config = InductionConfig(budget=80, minibatch=3, seed=0)

    def lms():
        return (WorstCaseLM(reading_answers, model="worst-judge", max_tokens=JUDGE_TOKENS, num_retries=0),
                WorstCaseLM(make_reflection_lm([]).respond, model="worst-reflection", max_tokens=REFLECTION_TOKENS,
                            num_retries=0))

    judge_lm, reflection_lm = lms()
    free = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config, init=make())
    judge_lm, reflection_lm = lms()
    capped = induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                    init=make(), token_budget=10**9)
    assert capped.judge.rubric_sha256 == free.judge.rubric_sha256 and capped.sweep == free.sweep
    report = capped.token_budget
    assert report["by_lm"]["judge"]["calls"] == len(judge_lm.prompt_bytes) > capped.metric_calls  # several per item
    total = report["spent"]
    assert total == spent_by(judge_lm, JUDGE_TOKENS) + spent_by(reflection_lm, REFLECTION_TOKENS)

    for cap in (total // 10, total // 2):
        judge_lm, reflection_lm = lms()
        with pytest.raises(BudgetExhausted):
            induce(split.train, split.val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                   init=make(), token_budget=cap)
        assert 0 < spent_by(judge_lm, JUDGE_TOKENS) + spent_by(reflection_lm, REFLECTION_TOKENS) <= cap
