"""`RubricInducer`: rubric induction as a DSPy optimizer (a `dspy.teleprompt.Teleprompter`).

    inducer = RubricInducer(reflection_lm=dspy.LM("openai/gpt-4o"), budget=200, max_false_pass=0.1)
    judge = inducer.compile(TrajectoryJudge(), trainset=examples)          # the judge LM: dspy.settings.lm
    judge.detailed_results.sweep                                          # every candidate, as dspy.GEPA does
    again = inducer.compile(load(path), trainset=new_examples)            # recompiling starts from its rubric

The data is `dspy.Example(trajectory=<Trajectory>, label=0|1, ...).with_inputs("trajectory")`; only the
trajectory is an input and only its observable steps are rendered, so the label and every other field
of the example never reach the judge. The examples are checked whole before any LM call.

The search itself (GEPA with the symptom-focused feedback metric, the memorization guard, the circuit
breaker, the operating point) is `induction.search.run_search`; `induce` (`induction.inducer`) is the
file-writing layer over `compile`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

import dspy
from dspy.teleprompt import Teleprompter

from rubricforge_dspy._dspy_compat import input_keys
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.presets import LIBRARY
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.induction.guards import ReadingJudge
from rubricforge_dspy.induction.search import (
    InductionConfig,
    InductionResult,
    check_induction_data,
    run_search,
    validation_metrics,
)
from rubricforge_dspy.judge.batching import judge_batch
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.lm.budget import TokenBudget
from rubricforge_dspy.lm.budgeted import BudgetedLM, budget_report, stops_at_budget, unbudgeted
from rubricforge_dspy.lm.circuit import LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import resolve_lm
from rubricforge_dspy.lm.pricing import CostBudget
from rubricforge_dspy.program.store import data_fingerprint

__all__ = ["RubricInducer", "examples_to_trajectories"]

logger = logging.getLogger(__name__)

Certify = Callable[..., dict[str, Any]]

_HOW = ("build examples as dspy.Example(trajectory=<Trajectory>, label=0|1).with_inputs('trajectory') "
        "(rubricforge_dspy.data loaders give Trajectory records)")


def _example_id(example: Any, index: int, where: str) -> str:
    trajectory = example.get("trajectory") if hasattr(example, "get") else None
    ident = example.get("id") if hasattr(example, "get") else None
    if ident is None and isinstance(trajectory, Trajectory):
        ident = trajectory.id
    return f"{where}[{index}] (id {ident})" if ident is not None else f"{where}[{index}]"


def _labeled_trajectory(example: Any, index: int, where: str) -> Trajectory:
    name = _example_id(example, index, where)
    if not isinstance(example, dspy.Example):
        raise InputError(f"{name}: expected a dspy.Example, got {type(example).__name__}; {_HOW}")
    if "trajectory" not in example:
        raise InputError(f"{name}: the example has no 'trajectory' field; {_HOW}")
    inputs = input_keys(example)
    if inputs is None or "trajectory" not in inputs:
        raise InputError(f"{name}: 'trajectory' is not marked as the input; call .with_inputs('trajectory')")
    extra = sorted(set(inputs) - {"trajectory"})
    if extra:
        raise InputError(f"{name}: input field(s) {extra} besides 'trajectory': the judge reads the trajectory "
                         "only, and a label marked as an input could leak; call .with_inputs('trajectory')")
    trajectory = example.trajectory
    if not isinstance(trajectory, Trajectory):
        raise InputError(f"{name}: 'trajectory' is a {type(trajectory).__name__}, not a Trajectory: induction "
                         "splits by task and shows symptoms from the steps, which rendered text has lost; "
                         "load the data with rubricforge_dspy.data")
    label = example.get("label") if "label" in example else trajectory.label
    if label is None:
        raise InputError(f"{name}: no label; induction needs a label (0 or 1) on every example: join labels "
                         "(rubricforge_dspy.data.load_examples(..., labels=); command line: --labels) or drop "
                         "the unlabeled examples")
    if isinstance(label, float) and label in (0.0, 1.0):
        label = int(label)
    if not isinstance(label, int) or label not in (0, 1):
        raise InputError(f"{name}: label must be 0 or 1 (or a bool), got {label!r}")
    reward = example.get("reward") if "reward" in example else None
    if reward is None:
        reward = trajectory.reward if trajectory.label == int(label) and trajectory.reward is not None else float(label)
    if int(label) == trajectory.label and float(reward) == trajectory.reward:
        return trajectory
    return dataclasses.replace(trajectory, label=int(label), reward=float(reward))


def examples_to_trajectories(examples: Iterable[Any], where: str = "trainset") -> list[Trajectory]:
    """The labeled `Trajectory` of each example, checked: a `dspy.Example` whose only input is a
    ``trajectory`` holding a `Trajectory`, with a 0/1 ``label`` (the example's, else the trajectory's own),
    and ids unique within `examples`.

    Args:
        examples: ``dspy.Example(trajectory=<Trajectory>, label=0|1, ...).with_inputs("trajectory")``.
        where: how the set is named in errors (``trainset``, ``valset``, ``testset``).

    Returns:
        The trajectories, with the example's label and reward when they differ from the record's.

    Raises:
        InputError: naming the first bad example (its index and id) and what to do.
    """
    if examples is None:
        return []
    if isinstance(examples, (str, bytes, dict)) or not isinstance(examples, Iterable):
        raise InputError(f"{where}: expected a list of dspy.Example, got {type(examples).__name__}")
    trajectories = [_labeled_trajectory(example, i, where) for i, example in enumerate(examples)]
    duplicated = [ident for ident, n in Counter(t.id for t in trajectories).items() if n > 1]
    if duplicated:
        raise InputError(f"{where}: {len(duplicated)} trajectory id(s) appear more than once (first: "
                         f"{duplicated[0]}); each labeled episode must be given once")
    return trajectories


def _check_disjoint(first: list[Trajectory], second: list[Trajectory], names: str, *, tasks: bool) -> None:
    ids = sorted({t.id for t in first} & {t.id for t in second})
    if ids:
        raise InputError(f"{names}: {len(ids)} trajectory id(s) are in both (first: {ids[0]}); the sets must be "
                         "disjoint")
    shared = sorted({(t.domain, t.task_id) for t in first} & {(t.domain, t.task_id) for t in second})
    if shared and tasks:
        raise InputError(f"{names}: {len(shared)} task(s) are in both (first: {shared[0][0]}/{shared[0][1]}); a "
                         "held-out test set must hold tasks the judge was never induced or selected on")
    if shared:
        logger.warning("%s: %d task(s) are in both (first: %s/%s); selection on tasks seen in training is "
                       "optimistic (leave valset=None for a split by task)", names, len(shared), *shared[0])


class RubricInducer(Teleprompter):  # type: ignore[misc]  # dspy ships no type information (no py.typed)
    """Induce a `TrajectoryJudge`'s rubric from labeled examples with dspy.GEPA.

    Args:
        reflection_lm: the LM GEPA proposes new rubrics with.
        budget: GEPA metric calls (judge calls on train and val); at least one validation pass.
        fp_weight: cost of a false pass in false fails (>= 1; 1 is plain agreement).
        max_false_pass: a cap on the validation false-pass rate: candidates within it are preferred and
            a pass threshold on calibrated scores enforces it (None: no cap).
        seed: GEPA's seed, and the split's when `compile` gets no valset.
        log_dir: GEPA's checkpoint directory (a re-run with the same data and settings resumes).
        minibatch: GEPA's reflection minibatch size.
        calibration: ``"platt"``, ``"isotonic"`` or None: fit on the validation verdicts.
        num_threads: GEPA evaluation threads (judge requests in flight).
        val_fraction: the share of tasks held out for validation when `compile` gets no valset.
        certify: with a testset, ``certify(records, lm=, data_fingerprint=, rubric_sha256=) -> dict``
            computes ``detailed_results.certificate`` from the test verdict lines (id, task_id, label,
            passed, score, abstained, contradiction); pass
            `rubricforge_dspy.trust.certificate.certificate_for`.
        token_budget: a hard cap on the tokens (prompt plus completion, as the LMs report them) of every LM call
            `compile` makes: GEPA's judge and reflection calls, the validation pass and the testset's. Each call
            reserves its worst case first (`lm.budgeted.BudgetedLM`); a call that could cross the cap is not made and
            `compile` raises `BudgetExhausted` (nothing is returned; with `log_dir`, a re-run with a larger cap
            resumes GEPA from its last checkpoint). A `TokenBudget` is shared (spent across compiles and other
            runs); a number is a new cap for each `compile`. A `lm.pricing.CostBudget` caps the US dollars instead
            (each call's worst case costed at its LM's price, `CostBudget.price_for`). ``detailed_results.token_budget``
            says what each LM spent. None: no cap.
        **settings: further `InductionConfig` fields (``max_rubric_chars``, ``use_merge``,
            ``max_consecutive_lm_errors``).

    Raises:
        InputError: a setting out of range (see `InductionConfig`).
    """

    def __init__(self, *, reflection_lm: dspy.BaseLM, budget: int = LIBRARY.budget, fp_weight: float = 1.0,
                 max_false_pass: float | None = None, seed: int = 0, log_dir: str | Path | None = None,
                 minibatch: int = LIBRARY.minibatch, calibration: str | None = "platt",
                 num_threads: int = LIBRARY.num_threads, val_fraction: float = 0.25,
                 certify: Certify | None = None, token_budget: int | TokenBudget | CostBudget | None = None,
                 **settings: Any):
        super().__init__()
        if reflection_lm is None:
            raise InputError("RubricInducer needs a reflection_lm (the LM that writes candidate rubrics)")
        if not 0.0 < val_fraction < 1.0:
            raise InputError(f"val_fraction must be in (0, 1), got {val_fraction}")
        self.reflection_lm = reflection_lm
        self.config = InductionConfig(budget=budget, fp_weight=fp_weight, max_false_pass=max_false_pass, seed=seed,
                                      minibatch=minibatch, calibration=calibration, num_threads=num_threads,
                                      **settings)
        self.log_dir = log_dir
        self.val_fraction = val_fraction
        self.certify = certify
        if token_budget is not None and not isinstance(token_budget, (TokenBudget, CostBudget)):
            TokenBudget(token_budget)  # a bad cap is refused here, not at compile
        self.token_budget = token_budget

    @classmethod
    def from_config(cls, config: InductionConfig, *, reflection_lm: dspy.BaseLM, log_dir: str | Path | None = None,
                    **options: Any) -> "RubricInducer":
        """An inducer with the settings of `config` (an `InductionConfig`)."""
        return cls(reflection_lm=reflection_lm, log_dir=log_dir, **dataclasses.asdict(config), **options)

    def compile(self, student: TrajectoryJudge | ReadingJudge, *, trainset: list[dspy.Example], teacher: None = None,
                valset: list[dspy.Example] | None = None, testset: list[dspy.Example] | None = None,
                **kwargs: Any) -> TrajectoryJudge | ReadingJudge:
        """Evolve `student`'s rubric on `trainset`, choose on `valset`, fit the operating point there.

        Args:
            student: the judge to start from: its rubric is GEPA's seed candidate, its render and adapter
                are kept (a loaded program recompiles from its own rubric). Its LM (``student.set_lm``),
                else ``dspy.settings.lm``, is the judge LM. A long-episode judge (`judge.segments.SegmentsJudge`,
                `judge.explorer.ExplorerJudge`) is evolved too: GEPA is given the `Trajectory` (it reads the
                steps itself), proposes for every predictor, and no operating point is fit (it has none yet).
            trainset: labeled examples GEPA reflects on
                (``dspy.Example(trajectory=<Trajectory>, label=0|1).with_inputs("trajectory")``).
            teacher: not used (DSPy's `Teleprompter` signature); must be None.
            valset: labeled examples candidates are scored and selected on, and the calibration is fit
                on; None splits `trainset` by task (`val_fraction` of the tasks, seeded), so no task
                is in both.
            testset: held-out labeled examples the returned judge is measured on
                (``detailed_results.test_metrics``, and ``.certificate`` with `certify`); never used to
                choose anything. Its tasks must not be in trainset or valset.
            **kwargs: none are accepted.

        Returns:
            A new judge of the student's kind (`TrajectoryJudge`, or the long-episode judge) with the chosen
            rubric and operating point, the student's LM and render, and ``detailed_results``: an
            `InductionResult` (candidates, sweep, ``best_index`` and ``selection`` (why), ``operating_point``,
            ``val_metrics``, rejected candidates, LM errors, notes, GEPA's own result as ``gepa``, and the test
            metrics and certificate).

        Raises:
            InputError: a bad example (named by set, index and id), no judge LM, data that cannot work
                (one class, a budget below one validation pass), or a log dir of another run.
            JudgeUnavailableError: the judge LM failed too many times in a row, or the reflection LM failed.
            BudgetExhausted: the next LM call could have crossed `token_budget`: the message says what each LM spent.
        """
        if teacher is not None or kwargs:
            raise InputError(f"RubricInducer.compile takes no teacher or {sorted(kwargs)}: the judge LM is the "
                             "student's (student.set_lm) or dspy.settings.lm")
        if not isinstance(student, (TrajectoryJudge, SegmentsJudge, ExplorerJudge)):
            raise InputError(f"student must be a TrajectoryJudge (e.g. TrajectoryJudge() or a loaded program), a "
                             f"SegmentsJudge or an ExplorerJudge, got {type(student).__name__}")
        train = examples_to_trajectories(trainset, "trainset")
        val = examples_to_trajectories(valset, "valset") if valset is not None else None
        test = examples_to_trajectories(testset, "testset") if testset is not None else []
        judge_lm = resolve_lm(student)
        if judge_lm is None:
            raise InputError("no judge LM: set the student's (student.set_lm(lm)) or configure one "
                             "(dspy.configure(lm=lm)) before compile")
        if val is None:
            split = split_by_task(train, (1.0 - self.val_fraction, self.val_fraction, 0.0), self.config.seed)
            train, val = split.train, split.val
        else:
            _check_disjoint(train, val, "trainset and valset", tasks=False)
        if test:
            _check_disjoint([*train, *val], test, "trainset/valset and testset", tasks=True)
            if self.certify is None:
                logger.warning("a testset without certify=: test metrics only, no certificate (pass "
                               "certify=rubricforge_dspy.trust.certificate.certificate_for)")
        check_induction_data(train, val, self.config)

        result = self._search(student, train, val, test, judge_lm)
        judge = result.judge
        for mine, theirs in zip(judge.predictors(), student.predictors(), strict=True):
            mine.lm = theirs.lm
        judge.detailed_results = result
        return judge

    def _search(self, student: TrajectoryJudge | ReadingJudge, train: list[Trajectory], val: list[Trajectory],
                test: list[Trajectory], judge_lm: dspy.BaseLM) -> InductionResult:
        """`run_search`, then the testset's pass, every LM call under `token_budget` when there is one: the judge and
        reflection LMs wrapped in `BudgetedLM` (an LM without max_tokens is refused before any call), a refused call
        turned into `BudgetExhausted` saying what each LM spent (`stops_at_budget`), the spending on the result."""
        budget = (self.token_budget if isinstance(self.token_budget, (TokenBudget, CostBudget))
                  or self.token_budget is None else TokenBudget(self.token_budget))
        flag = "--cost-budget" if isinstance(budget, CostBudget) else "--token-budget"
        reflection_lm = self.reflection_lm
        if budget is not None:
            judge_lm = BudgetedLM(judge_lm, budget, "judge")
            reflection_lm = BudgetedLM(reflection_lm, budget, "reflection")
        resume = (" with the same log_dir (command line: --log-dir), GEPA resumes from its last checkpoint"
                  if self.log_dir is not None else "")
        with stops_at_budget(budget, [judge_lm, reflection_lm],
                             "The induction stopped there: no judge was returned and no program written; re-run with "
                             f"a larger {flag[2:].replace('-', ' ')} (command line: {flag}){resume}"):
            result = run_search(train, val, seed=student, judge_lm=judge_lm, reflection_lm=reflection_lm,
                                config=self.config, log_dir=self.log_dir)
            if test:  # (the judge has no LM of its own yet: the test pass calls the budgeted one)
                self._measure(result.judge, test, judge_lm, result)
        if budget is not None:
            result.token_budget = budget_report(budget, [judge_lm, reflection_lm])
        return result

    def _measure(self, judge: TrajectoryJudge | ReadingJudge, test: list[Trajectory], judge_lm: dspy.BaseLM,
                 result: InductionResult) -> None:
        """The returned judge's verdicts on the testset (the batch engine, with a dead-server circuit: a dead server
        raises `JudgeUnavailableError` rather than certify abstentions), its metrics and (with `certify`) its
        certificate."""
        circuit = LMCircuit(self.config.max_consecutive_lm_errors, lm_name(judge_lm), counted=" after retries",
                            advice="Stopped before the testset's certificate: check the judge LM's endpoint and "
                                   "compile again.")
        with dspy.context(lm=judge_lm):  # the batch engine, `config.num_threads` calls at once; a dead server stops it
            verdicts = judge_batch(judge, test, window=max(1, self.config.num_threads), circuit=circuit)
        result.test_verdicts = verdicts
        result.test_metrics = {key.replace("val_", "test_"): value
                               for key, value in validation_metrics(verdicts, test).items()}
        if self.certify is not None:
            records = [{"id": t.id, "task_id": t.task_id, "label": t.label, **v.to_dict()}
                       for t, v in zip(test, verdicts, strict=True)]
            result.certificate = self.certify(records, lm=unbudgeted(judge_lm), data_fingerprint=data_fingerprint(test),
                                              rubric_sha256=rubric_sha256(judge.rubric))
