"""The rubric search: dspy.GEPA over a judge's rubric on labeled trajectories, and the choice of the best.

`run_search` is the engine behind `RubricInducer.compile` (`induction.teleprompter`), which checks the
examples and splits them first; `induce` (`induction.inducer`) freezes its result to a file.

The GEPA metric is agreement between the judge's verdict and the label. Its feedback tells the
reflection LM the true outcome and points at *observable* evidence in the trajectory (tool errors,
claims with no successful call behind them, missing confirmations); it never mentions rewards or
anything from the evaluator, so the evolved rubric encodes symptoms of success, not an answer key.

Strictness. During induction the judge raises on a bad answer, as DSPy modules do: an unparsable,
repaired or truncated verdict is an `AdapterParseError` that GEPA records as a format failure
(``add_format_failure_as_feedback=True``) and shows to the reflection LM. LM or network errors are
counted by a circuit breaker: after `InductionConfig.max_consecutive_lm_errors` consecutive failures
the run stops at once with `JudgeUnavailableError` naming the endpoint and the cause; no program is
written, and the log directory keeps GEPA's last checkpoint (taken before the failing iteration), so
re-running with the same ``--log-dir`` resumes. The chosen rubric's validation pass after GEPA (the verdicts
its operating point is fitted on) runs through the in-memory batch engine (`judge.batching.judge_batch`) with
the same circuit: a server that dies then stops the run too, never a validation made of abstentions. GEPA's own
evaluations run on DSPy's executor (``dspy.GEPA(num_threads=...)``), left as DSPy has it.

Memorization guard. Candidate rubrics that contain identifiers, names, amounts, dates or codes of
the training episodes (and not of the seed rubric) are rejected before GEPA evaluates them
(`rubricforge_dspy.induction.memorization`); the count is reported with the sweep.

Cost-sensitive operating point: with `fp_weight = w`, a false pass scores ``1 - w`` instead of 0,
so a candidate's mean score is ``1 - (FN + w * FP) / n``: the rubric search then trades w false
fails for one false pass. w = 1 is plain agreement.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import dspy
from dspy.utils.exceptions import LMError
from gepa.utils import FileStopper

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.presets import INDUCTION_MAX_CONSECUTIVE_LM_ERRORS, LIBRARY
from rubricforge_dspy.core.progress import progress
from rubricforge_dspy.core.rubric import SEED_RUBRIC, rubric_sha256
from rubricforge_dspy.core.sizes import warn_small
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.evidence.symptoms import extract_symptoms
from rubricforge_dspy.induction.checkpoint import GEPACheckpoint
from rubricforge_dspy.induction.guards import CircuitJudge, GuardedProposer, ReadingJudge, reading_copy
from rubricforge_dspy.induction.memorization import Memorized
from rubricforge_dspy.judge.batching import judge_batch
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.operating_point import NOTHING_PASSES
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.lm.circuit import CircuitOpen, JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import lm_name as describe_lm
from rubricforge_dspy.lm.copies import sized_lm
from rubricforge_dspy.program.store import data_fingerprint

logger = logging.getLogger(__name__)

REFLECTION_PROMPT = """\
You maintain the rubric (the instruction) of an AI judge that reads the observable record of an AI \
agent's episode (user turns, agent messages, tool calls, tool results with errors marked, counters, \
final answer) and decides whether the agent really accomplished the user's task.

You are given the current rubric, episodes the judge saw, its verdicts, and feedback stating the true \
outcome and the observable evidence that should have decided it.

Write an improved rubric. Requirements:
- Keep a short preamble, then numbered criteria, one per line, in the form "N. Name: what to check", \
each phrased as evidence that can be verified in the record (for example: a committing tool call whose \
result shows success; a final claim contradicted by a tool error; a state change made without the user's \
explicit yes).
- Criteria must generalize to unseen tasks: never mention specific users, ids, products, dates, \
amounts, or individual episodes.
- Keep what the current rubric gets right; add, sharpen or remove criteria to fix the judge's mistakes.
- End with the scoring rule: score is the probability in [0, 1] that the task was accomplished and \
passed is true exactly when score >= 0.5.
- Keep it under 2500 characters."""


@dataclass(frozen=True)
class InductionConfig:
    """The settings of one induction: GEPA's budget (metric calls), minibatch and seed, the false-pass
    weight of the agreement metric, the rubric's length cap, evaluation threads, merge, the reflection LM's
    error tolerance, the validation false-pass cap and the score calibration (`RubricInducer` takes them as
    keyword arguments; invalid values raise `InputError`)."""

    # Sizes: the library's defaults (rubricforge_dspy.core.presets.LIBRARY).
    budget: int = LIBRARY.budget  # max metric calls (judge calls on train + val)
    minibatch: int = LIBRARY.minibatch
    seed: int = 0
    fp_weight: float = 1.0
    max_rubric_chars: int = LIBRARY.max_rubric_chars
    num_threads: int = LIBRARY.num_threads
    use_merge: bool = False
    max_consecutive_lm_errors: int = INDUCTION_MAX_CONSECUTIVE_LM_ERRORS
    max_false_pass: float | None = None  # the false-pass cap (Neyman-Pearson operating point); None: none
    calibration: str | None = "platt"  # fit on validation verdicts: "platt", "isotonic" or None

    def __post_init__(self) -> None:
        if self.fp_weight < 1.0:
            raise InputError(f"fp_weight must be >= 1 (a false pass costs at least a false fail), got {self.fp_weight}")
        if self.budget < 1 or self.minibatch < 1:
            raise InputError("budget and minibatch must be positive")
        if self.max_consecutive_lm_errors < 1:
            raise InputError("max_consecutive_lm_errors must be >= 1")
        if self.max_false_pass is not None and not 0.0 <= self.max_false_pass < 1.0:
            raise InputError(f"max_false_pass must be in [0, 1), got {self.max_false_pass}")
        if self.max_false_pass is not None and self.calibration is None:
            raise InputError("max_false_pass chooses a threshold on calibrated scores: keep a calibration method")


@dataclass
class InductionResult:
    """What an induction found, as ``judge.detailed_results`` (`RubricInducer.compile`): the chosen judge,
    the sweep (one row per candidate, with validation metrics), the chosen index and why, the candidates
    rejected by the memorization guard, LM errors, the operating point, with a testset its metrics and
    certificate, and with a token budget what each LM spent."""

    judge: TrajectoryJudge | ReadingJudge
    sweep: list[dict[str, Any]]
    best_index: int
    beat_seed: bool
    manifest: dict[str, Any] = field(default_factory=dict)
    rejected: list[dict[str, Any]] = field(default_factory=list)  # candidates rejected by the memorization guard
    lm_errors: int = 0  # judge calls that failed with an LM error (scored as failures by GEPA)
    notes: list[str] = field(default_factory=list)
    val_verdicts: list[Verdict] = field(default_factory=list)  # the frozen judge's raw `Verdict`s on val, in order
    # What `RubricInducer.compile` puts on the judge it returns (``judge.detailed_results``), as dspy.GEPA does:
    candidates: list[str] = field(default_factory=list)  # every accepted candidate's rubric, seed first (sweep order)
    selection: str = ""  # why `best_index` was chosen
    # "calibration" and "threshold" fit on val (manifest fields)
    operating_point: dict[str, Any] = field(default_factory=dict)
    # `validation_metrics` of the chosen judge's verdicts on val
    val_metrics: dict[str, Any] = field(default_factory=dict)
    metric_calls: int = 0  # judge calls GEPA made
    reflection_failures: int = 0  # reflection answers that proposed nothing (cut or unparsable)
    reflection_lm: str | None = None
    config: "InductionConfig | None" = None
    train: list[Trajectory] = field(default_factory=list, repr=False)  # the labeled trajectories GEPA reflected on
    val: list[Trajectory] = field(default_factory=list, repr=False)  # ... and selected/calibrated on
    gepa: object = field(default=None, repr=False)  # dspy.GEPA's own `detailed_results` (DspyGEPAResult)
    test_metrics: dict[str, Any] | None = None  # `validation_metrics` on the testset, when `compile` got one
    # the returned judge's `Verdict`s on the testset, in order
    test_verdicts: list[Verdict] = field(default_factory=list)
    certificate: dict[str, Any] | None = None  # the certificate on the testset, when `compile` got one and a `certify`
    # with a token budget: `lm.budgeted.budget_report` (cap, spent, and what each LM spent: ``by_lm``)
    token_budget: dict[str, Any] | None = None


def _labels(trajectories: Iterable[Trajectory], needed_by: str) -> list[int]:
    """The labels of `trajectories`, in order; `UnlabeledError` (naming `needed_by`) when one has none."""
    return [int(t.label) for t in require_labels(trajectories, needed_by) if t.label is not None]


def rendered_examples(trajectories: list[Trajectory], render_config: RenderConfig | None = None) -> list[dspy.Example]:
    """Labeled examples for GEPA; only `trajectory` (the rendered text) is a program input."""
    config = render_config or RenderConfig()
    return [
        dspy.Example(
            trajectory=render_trajectory(t, config),
            label=label,
            id=t.id,
            evidence=extract_symptoms(t).lines(),
        ).with_inputs("trajectory")
        for t, label in zip(trajectories, _labels(trajectories, "GEPA's examples"), strict=True)
    ]


def trajectory_examples(trajectories: list[Trajectory]) -> list[dspy.Example]:
    """Labeled examples for GEPA over a long-episode judge (`judge.segments`, `judge.explorer`), which reads the
    steps itself: the program input `trajectory` is the `Trajectory` (its observable steps are all such a judge
    reads: never the label, reward or hidden fields)."""
    return [
        dspy.Example(trajectory=t, label=label, id=t.id, evidence=extract_symptoms(t).lines()).with_inputs("trajectory")
        for t, label in zip(trajectories, _labels(trajectories, "GEPA's examples"), strict=True)
    ]


def _whole_text(trajectory: Trajectory, config: RenderConfig) -> str:
    """Every step of `trajectory` as rendered, nothing elided (what the memorization guard compares candidate
    rubrics with, for a judge that reads the whole episode)."""
    return render_trajectory(trajectory, dataclasses.replace(config, max_tokens=10**9))


def verdict_outcome(label: int, pred: Any) -> str:
    """One of: correct, false_pass, false_fail, abstained."""
    if getattr(pred, "abstained", False):
        return "abstained"
    passed = bool(getattr(pred, "passed", False))
    if passed == bool(label):
        return "correct"
    return "false_pass" if passed else "false_fail"


def _feedback(gold: Any, pred: Any, outcome: str) -> str:
    truth = "accomplished" if gold.label else "did NOT accomplish"
    evidence = list(gold.get("evidence") or [])
    evidence_text = "\n".join(f"- {line}" for line in evidence) or "- (no surface failure signal was detected)"
    if outcome == "abstained":
        return (
            "FORMAT FAILURE: the judge did not return a parsable verdict "
            f"({getattr(pred, 'error', '')[:200]}); this counts as a wrong verdict. Keep the rubric's output "
            "instructions simple and explicit: a one-sentence reason, a boolean passed, a score in [0, 1]."
        )
    if outcome == "correct":
        return (f"Correct verdict: the agent {truth} the user's task. Observable evidence consistent with this:\n"
                f"{evidence_text}")
    if outcome == "false_pass":
        return (
            f"WRONG (false pass): the judge passed this episode, but the agent {truth} the user's task. "
            f"The judge's reason was: {pred.reason!r}. Observable evidence the rubric should make decisive:\n"
            f"{evidence_text}\n"
            "Check whether the final message claims more than the tool results show, whether a committing "
            "call failed or never happened, whether a lookup failed, or whether the user's confirmation was "
            "never obtained. Add or sharpen criteria, phrased as observable evidence, that would fail episodes "
            "like this one."
        )
    return (
        f"WRONG (false fail): the judge failed this episode, but the agent {truth} the user's task. "
        f"The judge's reason was: {pred.reason!r}. Observable evidence in the record:\n{evidence_text}\n"
        "The rubric is too strict here: make sure criteria do not penalize errors that were later resolved, "
        "tasks whose correct outcome needed no state change, or polite refusals that the tool results justify."
    )


def make_feedback_metric(fp_weight: float = 1.0,
                         on_score: Callable[[int], Any] | None = None) -> Callable[..., dspy.Prediction]:
    """GEPA feedback metric: (gold, pred, trace, pred_name, pred_trace) -> Prediction(score, feedback).
    `on_score` is called with 1 for each scored judge call (GEPA's budget unit; not for the reflection's
    feedback calls, which carry a ``pred_name``): the command line's progress."""

    def metric(gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> Any:
        if on_score is not None and pred_name is None:
            on_score(1)
        outcome = verdict_outcome(gold.label, pred)
        score = {"correct": 1.0, "false_fail": 0.0, "abstained": 0.0, "false_pass": 1.0 - fp_weight}[outcome]
        return dspy.Prediction(score=score, feedback=_feedback(gold, pred, outcome))

    return metric


def _agreement(subscores: dict[str, Any]) -> float:
    values = list(subscores.values())
    return sum(v == 1.0 for v in values) / len(values) if values else float("nan")


def sweep_table(detailed: Any) -> list[dict[str, Any]]:
    """One row per accepted candidate (seed first, then children in acceptance order)."""
    rows = []
    for index, candidate in enumerate(detailed.candidates):
        rubric = candidate.rubric
        # a long-episode judge's identity is every predictor's instruction (GEPA may evolve them apart)
        reading = isinstance(candidate, (SegmentsJudge, ExplorerJudge))
        digest = candidate.rubric_sha256 if reading else rubric_sha256(rubric)
        rows.append({
            "candidate": index,
            "parents": [p for p in (detailed.parents[index] or []) if p is not None],
            "val_score": round(float(detailed.val_aggregate_scores[index]), 6),
            "val_agreement": round(_agreement(detailed.val_subscores[index]), 6),
            "discovered_at_metric_call": int(detailed.discovery_eval_counts[index]),
            "rubric_sha256": digest,
            "rubric_chars": len(rubric),
        })
    return rows


def validation_metrics(verdicts: list[Verdict], val: list[Trajectory]) -> dict[str, Any]:
    """Agreement, false-pass rate and abstentions of validation `verdicts`, recorded at freeze time."""
    from rubricforge_dspy.metrics import accuracy, false_pass_rate

    y_true = _labels(val, "the validation metrics")
    y_pred = [int(v.passed and not v.abstained) for v in verdicts]
    negatives = len(y_true) - sum(y_true)
    return {
        "val_agreement": round(accuracy(y_true, y_pred), 6),
        "false_pass_rate": round(false_pass_rate(y_true, y_pred), 6) if negatives else None,
        "val_abstained": sum(bool(v.abstained) for v in verdicts),
        "val_contradictions": sum(bool(v.contradiction) for v in verdicts),
        "val_size": len(val),
    }


NO_CALIBRATION_ONE_CLASS = "no calibration: the validation verdicts hold one class only"


def fit_operating_point(judge: TrajectoryJudge, verdicts: list[Verdict], val: list[Trajectory],
                        config: InductionConfig) -> dict[str, Any]:
    """Fit `judge`'s calibration on its validation verdicts (abstentions left out) and, with a false-pass
    cap, the Neyman-Pearson pass threshold on calibrated scores; sets them on `judge` and returns the
    manifest fields (``calibration``, ``threshold``) plus notes. Nothing is fit on one class."""
    from rubricforge_dspy.judge import operating_point as cal

    rows = [(v.score, label) for v, label in zip(verdicts, _labels(val, "the calibration fit"), strict=True)
            if not v.abstained]
    if config.calibration is None or len({label for _, label in rows}) < 2:
        if config.max_false_pass is not None:
            raise InputError(f"max_false_pass={config.max_false_pass} (command line: --max-false-pass) needs "
                             "validation verdicts of both classes to choose a threshold; those of this run "
                             "(abstentions left out) hold one class only: label more tasks of the other outcome")
        return {"notes": [NO_CALIBRATION_ONE_CLASS] if rows else []}
    calibration = cal.fit([s for s, _ in rows], [y for _, y in rows], config.calibration)
    judge.calibration = calibration
    fields: dict[str, Any] = {"calibration": calibration.to_dict(), "notes": []}
    if config.max_false_pass is not None:
        threshold = cal.neyman_pearson_threshold(calibration.apply_many([s for s, _ in rows]),
                                                 [y for _, y in rows], config.max_false_pass)
        judge.threshold = min(threshold.threshold, NOTHING_PASSES)
        fields["threshold"] = {**threshold.to_dict(), "pass_threshold": judge.threshold,
                               "rule": "pass when score_calibrated >= pass_threshold and no contradiction"}
        if judge.threshold >= NOTHING_PASSES:
            fields["notes"].append(f"no threshold keeps the validation false-pass rate within "
                                   f"{config.max_false_pass}: the frozen judge passes nothing")
    return fields


def _candidate_false_pass_rates(detailed: Any, val: list[Trajectory]) -> list[float | None]:
    """Each candidate's validation false-pass rate from GEPA's per-item scores: a failed item scored
    below 1 counts as a false pass. Exact when no format failure scored 0; otherwise an upper bound."""
    labels = [t.label for t in val]
    negatives = labels.count(0)
    rates = []
    for subscores in detailed.val_subscores:
        fails = sum(1 for i, score in subscores.items() if labels[i] == 0 and score < 1.0)
        rates.append(fails / negatives if negatives else None)
    return rates


def select_candidate(sweep: list[dict[str, Any]], config: InductionConfig) -> tuple[int, list[str], str]:
    """The frozen candidate, notes (warnings) and the reason it was chosen. Without a cap: the best
    validation score (ties to the earlier candidate, so the seed wins a tie); a candidate must beat the
    seed's score. With ``max_false_pass = a``: the best validation agreement among candidates whose
    validation false-pass rate is within `a` (the seed included); when none is, the best score, and the
    threshold enforces the cap."""
    notes: list[str] = []
    if config.max_false_pass is not None:
        eligible = [i for i, row in enumerate(sweep)
                    if row["val_false_pass_rate"] is not None and row["val_false_pass_rate"] <= config.max_false_pass]
        if eligible:
            best = max(eligible, key=lambda i: (sweep[i]["val_agreement"], -i))
            return best, notes, (f"best validation agreement ({sweep[best]['val_agreement']}) among the "
                                 f"{len(eligible)} candidate(s) whose validation false-pass rate is within "
                                 f"{config.max_false_pass}")
        notes.append(f"no candidate's validation false-pass rate is within {config.max_false_pass}; "
                     "freezing the best-scoring one, with a pass threshold that enforces the cap")
    best = max(range(len(sweep)), key=lambda i: (sweep[i]["val_score"], -i))
    if best != 0 and sweep[best]["val_score"] <= sweep[0]["val_score"]:
        best = 0
    if best == 0:
        notes.append("no candidate beat the seed rubric on validation; freezing the seed rubric")
        return best, notes, f"no candidate beat the seed's validation score ({sweep[0]['val_score']})"
    return best, notes, (f"best validation score ({sweep[best]['val_score']}, fp_weight {config.fp_weight}) "
                         f"above the seed's ({sweep[0]['val_score']})")


MIN_VAL_ITEMS = 10


def check_induction_data(train: list[Trajectory], val: list[Trajectory], config: InductionConfig) -> None:
    """Refuse what cannot work (unlabeled trajectories among them too), warn about what barely can,
    saying what to change."""
    require_labels([*train, *val], "induction")
    if not train or not val:
        raise InputError(f"induction needs non-empty train and val sets (got {len(train)} and {len(val)}); "
                         "give more labeled trajectories (several tasks), or sample more tasks (sample_tasks=; "
                         "command line: --sample-tasks)")
    if config.budget < len(val):
        raise InputError(f"budget={config.budget} (command line: --budget) is smaller than one validation pass "
                         f"({len(val)} judge calls): GEPA would spend it all scoring the seed. Either raise the "
                         f"budget to >= {len(val) + 2 * config.minibatch} judge calls (one validation pass plus a "
                         "few minibatches; the paper used 200; each call is one judge LM call on one trajectory), "
                         "or judge fewer trajectories: sample_tasks= (command line: --sample-tasks N) keeps N "
                         "tasks, so one validation pass costs about N x the validation share x the trials per "
                         "task judge calls")
    labels = set(_labels([*train, *val], "induction"))
    if len(labels) < 2:
        raise InputError(f"every labeled trajectory has label {labels.pop()}: agreement would be perfect without "
                         "judging anything. Add trajectories of the other outcome, or check the rule that made "
                         "labels of rewards (label_threshold=; command line: --label-threshold)")
    for name, part in (("train", train), ("val", val)):
        if len(set(_labels(part, "induction"))) < 2:
            warn_small(logger, "the %s split has labels of one class only; its feedback cannot teach both outcomes",
                       name)
    if len(val) < MIN_VAL_ITEMS:
        warn_small(logger, "the validation split has %d items: a candidate's agreement moves in steps of %.2f, so "
                   "selection is mostly noise. Label more tasks (>= %d validation items)",
                   len(val), 1 / len(val), MIN_VAL_ITEMS)



def _compile(student: CircuitJudge | ReadingJudge, trainset: list[dspy.Example], valset: list[dspy.Example], *,
             judge_lm: dspy.BaseLM, reflection_lm: dspy.BaseLM, config: InductionConfig, proposer: GuardedProposer,
             checkpoint: GEPACheckpoint | None, resume: str) -> TrajectoryJudge | ReadingJudge:
    """dspy.GEPA's compile of `student` under `judge_lm`, its failures as `JudgeUnavailableError`: the judge
    LM's circuit opened (`student.circuit`), or the reflection LM failed (`resume` says how to go on)."""
    # GEPA's run dir is a private directory (`GEPACheckpoint`): GEPA never reads the user's log dir
    with (checkpoint if checkpoint is not None else nullcontext() as run_dir,
          progress(config.budget, "induce", "judge call") as bar):
        optimizer = dspy.GEPA(
            metric=make_feedback_metric(config.fp_weight, on_score=bar.update),
            max_metric_calls=config.budget,
            reflection_minibatch_size=config.minibatch,
            reflection_lm=reflection_lm,
            instruction_proposer=proposer,
            add_format_failure_as_feedback=True,
            candidate_selection_strategy="pareto",
            use_merge=config.use_merge,
            num_threads=config.num_threads,
            log_dir=run_dir,
            track_stats=True,
            seed=config.seed,
            # a long-episode judge's predictors (window reader and verdict) all carry the rubric: one proposal each
            component_selector="round_robin" if isinstance(student, TrajectoryJudge) else "all",
            gepa_kwargs={"callbacks": [checkpoint], "stop_callbacks": [FileStopper(checkpoint.stop_file())]}
            if checkpoint is not None else None,
        )
        try:
            with dspy.context(lm=judge_lm):
                compiled: TrajectoryJudge | ReadingJudge = optimizer.compile(student, trainset=trainset,
                                                                             valset=valset)
                return compiled
        except CircuitOpen as abort:  # raised by `student.circuit`, its last error an outage exception
            last = student.circuit.last if student.circuit is not None else None
            raise JudgeUnavailableError(str(abort)) from (last if isinstance(last, BaseException) else None)
        except LMError as error:
            raise JudgeUnavailableError(
                f"reflection LM {describe_lm(reflection_lm)} failed: {type(error).__name__}: {error}. "
                "Check the reflection LM's endpoint and model (reflection_lm=; command line: "
                f"--reflection-api-base/--reflection-model); {resume}.") from error


def _student(seed: TrajectoryJudge | ReadingJudge, train: list[Trajectory], val: list[Trajectory],
             config: InductionConfig
             ) -> tuple[CircuitJudge | ReadingJudge, list[dspy.Example], list[dspy.Example], list[str]]:
    """The judge GEPA evolves from `seed`, its train and validation examples, and the training texts the
    memorization guard compares against: ``(student, trainset, valset, texts)``. A reading judge (segments,
    explorer) reads the Trajectory itself, so GEPA's input is it; it has no operating point yet, so a
    false-pass cap is refused (`InputError`)."""
    student: CircuitJudge | ReadingJudge
    if isinstance(seed, (SegmentsJudge, ExplorerJudge)):  # reads the Trajectory itself: GEPA's input is it
        if config.max_false_pass is not None:
            raise InputError(f"max_false_pass (--max-false-pass) needs an operating point, which the {seed.read_mode} "
                             "judge does not have yet: induce it without a false-pass cap")
        student = reading_copy(seed, circuit=True)
        trainset, valset = trajectory_examples(train), trajectory_examples(val)
        texts = [_whole_text(t, student.render_config) for t in train]
    else:
        student = CircuitJudge(seed.rubric, render_config=seed.render_config, adapter=seed.adapter)
        trainset = rendered_examples(train, student.render_config)
        valset = rendered_examples(val, student.render_config)
        texts = [ex.trajectory for ex in trainset]
    return student, trainset, valset, texts


def _frozen_judge(best: Any, seed: TrajectoryJudge | ReadingJudge,
                  student: CircuitJudge | ReadingJudge) -> TrajectoryJudge | ReadingJudge:
    """The judge frozen from GEPA's best candidate `best`, with `seed`'s adapter and `student`'s render."""
    judge: TrajectoryJudge | ReadingJudge
    if isinstance(best, (SegmentsJudge, ExplorerJudge)):
        judge = reading_copy(best)
        judge.adapter = seed.adapter
    else:
        judge = TrajectoryJudge(best.judge.signature.instructions, render_config=student.render_config,
                                adapter=seed.adapter)
    return judge


def run_search(train: list[Trajectory], val: list[Trajectory], *, seed: TrajectoryJudge | ReadingJudge,
               judge_lm: dspy.BaseLM,
               reflection_lm: dspy.BaseLM, config: InductionConfig,
               log_dir: str | Path | None = None) -> InductionResult:
    """GEPA over `seed`'s rubric on labeled `train`, selection and operating point on `val`.

    The engine of `RubricInducer.compile`; the data must already be checked (`check_induction_data`).
    Returns an `InductionResult` without a manifest (nothing is written but GEPA's log dir).

    Raises:
        InputError: `log_dir` belongs to another run or is not an induction log dir; a false-pass cap
            with validation verdicts of one class.
        JudgeUnavailableError: the judge LM failed too many times in a row, or the reflection LM failed.
        BudgetStop: `judge_lm` or `reflection_lm` is a `lm.budgeted.BudgetedLM` that refused a call (its budget would
            have been crossed); `RubricInducer.compile` turns it into `BudgetExhausted`.
    """
    judge_lm = sized_lm(judge_lm, connections=config.num_threads)
    resume = ("re-run with the same log_dir (command line: --log-dir) to resume" if log_dir is not None else
              "give a log_dir (command line: --log-dir) to make a run resumable")
    circuit = LMCircuit(config.max_consecutive_lm_errors, describe_lm(judge_lm),
                        advice=f"Check the judge LM's endpoint and model (api_base=, model=; command line: "
                               f"--api-base/--model) and that the server is up; {resume}.")
    student, trainset, valset, texts = _student(seed, train, val, config)
    student.circuit = circuit
    guard = Memorized(texts, allowed=[seed.rubric, SEED_RUBRIC, REFLECTION_PROMPT])

    checkpoint = None
    if log_dir is not None:  # refuses a log dir or a checkpoint that is not this run's, unpickling nothing
        checkpoint = GEPACheckpoint(log_dir, {
            "train": data_fingerprint(train), "val": data_fingerprint(val),
            "seed_rubric_sha256": rubric_sha256(student.rubric), "config": config.__dict__,
        })

    proposer = GuardedProposer(guard, base_instructions=REFLECTION_PROMPT, max_chars=config.max_rubric_chars)
    optimized = _compile(student, trainset, valset, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config,
                         proposer=proposer, checkpoint=checkpoint, resume=resume)
    detailed = optimized.detailed_results
    if checkpoint is not None:  # GEPA's own run dir is gone; its files are in the user's log dir
        detailed = dataclasses.replace(detailed, log_dir=str(checkpoint.log_dir))
    sweep = sweep_table(detailed)
    for row, rate in zip(sweep, _candidate_false_pass_rates(detailed, val), strict=True):
        row["val_false_pass_rate"] = None if rate is None else round(rate, 6)
    best_index, selection, reason = select_candidate(sweep, config)
    best = detailed.candidates[best_index]
    judge = _frozen_judge(best, seed, student)
    if guard.rejected:
        logger.warning("%d candidate rubric(s) rejected for memorizing training episodes", len(guard.rejected))

    lm_errors = circuit.total  # GEPA's: the calls it scored as failures
    with dspy.context(lm=judge_lm):  # the batch engine, `config.num_threads` calls at once; a dead server stops it
        raw = judge_batch(judge, val, window=max(1, config.num_threads), circuit=circuit)
    if isinstance(judge, TrajectoryJudge):
        operating = fit_operating_point(judge, raw, val, config)
        verdicts = [v.with_operating_point(judge.calibration.apply(v.score), judge.threshold)
                    if judge.calibration is not None else v for v in raw]
    else:
        operating = {"notes": [f"no calibration: the {judge.read_mode} judge has no operating point yet (its raw "
                               "score decides)"] if config.calibration is not None else []}
        verdicts = raw
    notes = [*selection, *operating.pop("notes")]
    one_class_val = len({t.label for t in val}) < 2
    for note in notes:
        if note == NO_CALIBRATION_ONE_CLASS and one_class_val:
            warn_small(logger, note)  # the split's size, not the judge: said once by a caller that chose it
        else:
            logger.warning(note)
    return InductionResult(
        judge=judge, sweep=sweep, best_index=best_index, beat_seed=best_index != 0, rejected=list(guard.rejected),
        lm_errors=lm_errors, notes=notes, val_verdicts=raw,
        candidates=[c.rubric for c in detailed.candidates], selection=reason,
        operating_point=operating, val_metrics=validation_metrics(verdicts, val),
        metric_calls=detailed.total_metric_calls, reflection_failures=len(proposer.failures),
        reflection_lm=getattr(reflection_lm, "model", None), config=config, train=list(train), val=list(val),
        gepa=detailed,
    )
