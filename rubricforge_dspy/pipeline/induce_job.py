"""One induction job: split by task -> induce with GEPA and freeze -> the symptom floor into the manifest
-> (optionally) the hybrid stack -> certify on the test split.

`rubricforge induce` is a thin shell around `run_induce_job`; the evaluation protocol
(`rubricforge_dspy.pipeline.protocol`) shares its induction step, `induce_and_freeze`, which is
`RubricInducer.compile` (`rubricforge_dspy.induction.teleprompter`) through `induce`, then the floor.

    split = induction_split(trajectories, sample_tasks=20, seed=0)
    result = run_induce_job(split, "programs/p.json", judge_lm=lm, reflection_lm=lm,
                            config=InductionConfig(budget=200), hybrid=True)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from rubricforge_dspy.core.errors import BudgetExhausted
from rubricforge_dspy.core.sizes import warn_small
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.split import DEFAULT_FRACTIONS, Split, sample_by_task, split_by_task
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.induction.inducer import InductionConfig, InductionResult, induce
from rubricforge_dspy.judge.hybrid import Stack, freeze_hybrid
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.budget import TokenBudget
from rubricforge_dspy.lm.budgeted import budget_report, spending
from rubricforge_dspy.lm.config import lm_name as describe_lm
from rubricforge_dspy.lm.pricing import CostBudget
from rubricforge_dspy.program.store import update_manifest
from rubricforge_dspy.trust.certify import certify_program

logger = logging.getLogger(__name__)

__all__ = ["InduceJobResult", "induction_split", "induce_and_freeze", "run_induce_job", "train_floor"]

NOT_CERTIFIED = ("not certified: the test split is empty or has one class; run `rubricforge certify` on "
                 "held-out labeled data")


@dataclass
class InduceJobResult:
    """What one induction job produced: the split, the induction (frozen at ``program``), the hybrid
    stack written into the program (when asked for), and the test-split certificate (None when not
    certified; `not_certified` then says why, unless certification was not asked for)."""

    split: Split
    induction: InductionResult
    program: Path
    hybrid: Stack | None = None
    certificate: dict[str, Any] | None = None
    not_certified: str | None = None
    # with a token budget: `lm.budgeted.budget_report` of the whole job (``other``: the certification's tokens)
    token_budget: dict[str, Any] | None = None

    def format_sweep(self) -> str:
        """The candidates GEPA accepted, one line each (validation agreement and score, the metric call
        that found it), the frozen one marked ``<- best``."""
        result = self.induction
        return "\n".join(
            f"candidate {row['candidate']:>2}  val agreement {row['val_agreement']:.3f}  score {row['val_score']:.3f}"
            f"  at call {row['discovered_at_metric_call']}{' <- best' if row['candidate'] == result.best_index else ''}"
            for row in result.sweep)

    def summary(self) -> str:
        """What a person should know of the job beside the sweep, one line each: the hybrid stack, why it
        was not certified, candidates rejected for memorizing training episodes, failed judge calls, a
        seed that no candidate beat, what each LM spent of a token budget, and the test-split certificate."""
        result, stack, lines = self.induction, self.hybrid, []
        if stack is not None:
            lines.append(f"hybrid: LLM score + {len(stack.model.inputs) - 1} symptom features, fit on "
                         f"{stack.fit['n']} validation verdicts; passes at p >= {stack.threshold:.3f}")
        if self.not_certified:
            lines.append(self.not_certified)
        if result.rejected:
            lines.append(f"rejected {len(result.rejected)} candidate rubric(s) that memorized training episodes "
                         f"(e.g. {'; '.join(result.rejected[0]['leaks'][:3])})")
        if result.lm_errors:
            lines.append(f"{result.lm_errors} judge call(s) failed with an LM error and scored as failures")
        if not result.beat_seed:
            lines.append("no candidate beat the seed rubric on validation; the frozen rubric is the seed")
        if self.token_budget is not None:
            kind = "cost budget" if "cap_usd" in self.token_budget else "token budget"
            lines.append(f"{kind}: {spending(self.token_budget, other='certification')}")
        if self.certificate is not None:
            fp = self.certificate["false_pass"]
            low, high = fp["interval"] if isinstance(fp.get("interval"), (list, tuple)) else (None, None)
            cap = result.config.max_false_pass if result.config is not None else None
            lines.append(f"certified on the test split: false-pass rate {fp['rate']} [{low}, {high}] on {fp['n']} "
                         f"failed item(s){f' (cap {cap})' if cap is not None else ''}; see `rubricforge show "
                         f"{self.program}`")
        return "\n".join(lines)


def induction_split(trajectories: list[Trajectory], *, sample_tasks: int | None = None, seed: int = 0,
                    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> Split:
    """The train/val/test split of an induction: one trial of `sample_tasks` seeded-random tasks when
    given (quick runs on slow LMs), then split by task so no task is in two parts."""
    if sample_tasks:
        trajectories = sample_by_task(trajectories, sample_tasks, seed)
    return split_by_task(trajectories, fractions, seed)


def train_floor(train: list[Trajectory], notes: list[str]) -> dict[str, Any] | None:
    """The symptom floor fit on the training split (`rubricforge_dspy.judge.floor`), as the manifest's
    ``floor``: a certificate measures the judge's margin over it. None (noted) when train holds one class."""
    from rubricforge_dspy.judge.floor import FloorError, SymptomFloor

    try:
        return SymptomFloor.fit(train).to_dict()
    except FloorError as error:
        notes.append(f"no symptom floor in the manifest: {error}")
        return None


def induce_and_freeze(train: list[Trajectory], val: list[Trajectory], out_path: str | Path, *, judge_lm: dspy.LM,
                      reflection_lm: dspy.LM, config: InductionConfig, init: TrajectoryJudge | None = None,
                      log_dir: str | Path | None = None, lm_name: str | None = None,
                      token_budget: int | TokenBudget | CostBudget | None = None) -> InductionResult:
    """Induce on `train`/`val` (`rubricforge_dspy.induction.inducer.induce`, under `token_budget` when given),
    freeze the best at `out_path`, and write the symptom floor fit on `train` into its manifest (``floor``; when it
    cannot be fit, a note in ``induction.notes`` and in the result's notes instead)."""
    result = induce(train, val, judge_lm=judge_lm, reflection_lm=reflection_lm, config=config, init=init,
                    log_dir=log_dir, out_path=out_path, lm_name=lm_name, token_budget=token_budget)
    notes: list[str] = []
    floor = train_floor(train, notes)
    for note in notes:
        if len({t.label for t in train}) < 2:
            warn_small(logger, note)  # the training split's size: said once by a caller that chose it
        else:
            logger.warning(note)
    if floor is not None:
        fields = {"floor": floor}
    else:
        induction = result.manifest.get("induction", {})
        fields = {"induction": {**induction, "notes": [*induction.get("notes", []), *notes]}}
    result.manifest = update_manifest(out_path, fields)
    result.notes.extend(notes)
    return result


def run_induce_job(split: Split, out_path: str | Path, *, judge_lm: dspy.LM, reflection_lm: dspy.LM,
                   config: InductionConfig, init: TrajectoryJudge | None = None, render: RenderConfig | None = None,
                   hybrid: bool = False, certify: bool = True, log_dir: str | Path | None = None,
                   concurrency: int = 1, lm_name: str | None = None,
                   token_budget: int | TokenBudget | CostBudget | None = None) -> InduceJobResult:
    """Induce a judge on `split` and freeze it at `out_path`, then (with `hybrid`) stack the symptom
    features on its validation verdicts into the same program, and (with `certify`) certify it on the
    test split, which it never saw, when that split holds both classes.

    Args:
        split: train (GEPA's feedback), val (selection, calibration, the hybrid's fit), test (certificate).
        out_path: the frozen program (``.json``).
        judge_lm: the judge's LM; also certifies.
        reflection_lm: GEPA's reflection LM (writes the candidate rubrics).
        config: budget, minibatch, seed, false-pass cap (also the hybrid's cap) and calibration.
        init: the program to start from (default: the seed rubric).
        render: the render of the induced judge (default: `init`'s).
        hybrid: freeze the hybrid judge (`rubricforge_dspy.judge.hybrid`) into the program.
        certify: certify on the test split.
        log_dir: GEPA's checkpoint directory (re-run with it to resume).
        concurrency: judge requests in flight while certifying.
        lm_name: the judge LM's name in the manifest (default: `judge_lm`'s).
        token_budget: a hard cap on the tokens of every LM call of the job: the induction's (GEPA's judge and
            reflection calls, the validation pass) and the certification's on the test split; each call reserves
            its worst case first (`lm.budget`); a `lm.pricing.CostBudget` caps their US dollars instead. The
            result's ``token_budget`` says what each spent.

    Returns:
        An `InduceJobResult`: the split, the induction result, the program path, the hybrid stack,
        the certificate (or why the program was not certified) and, with a token budget, what was spent.

    Raises:
        InputError: the split cannot be induced on (see `induce`), or the log dir belongs to another run.
        JudgeUnavailableError: the judge or reflection LM failed (see `induce`).
        CertificateError: the test split overlaps the program's training or validation data.
        BudgetExhausted: the next LM call could have crossed `token_budget`: during the induction, no program is
            written; during the certification, the program is written but not certified (the message says so).
    """
    out_path = Path(out_path)
    budget = (token_budget if token_budget is None or isinstance(token_budget, (TokenBudget, CostBudget))
              else TokenBudget(token_budget))
    flag = "--cost-budget" if isinstance(budget, CostBudget) else "--token-budget"
    init = init if init is not None else TrajectoryJudge()
    if render is not None:
        init.render_config = render
    induction = induce_and_freeze(split.train, split.val, out_path, judge_lm=judge_lm, reflection_lm=reflection_lm,
                                  config=config, init=init, log_dir=log_dir,
                                  lm_name=lm_name or describe_lm(judge_lm), token_budget=budget)
    result = InduceJobResult(split=split, induction=induction, program=out_path)
    if hybrid:
        result.hybrid = freeze_hybrid(out_path, split.val, induction.val_verdicts, config.max_false_pass)
    if certify and len({t.label for t in split.test}) == 2:
        try:
            result.certificate = certify_program(
                out_path, split.test, lm=judge_lm, where="test split", concurrency=concurrency,
                token_budget=budget if isinstance(budget, TokenBudget) else None,
                cost_budget=budget if isinstance(budget, CostBudget) else None,
                price=budget.price if isinstance(budget, CostBudget) else None)
        except BudgetExhausted as error:
            if budget is None:
                raise
            reason = error.__cause__ if isinstance(error.__cause__, BudgetExhausted) else error
            spent = spending(_job_budget(budget, induction), other="certification")
            raise BudgetExhausted(
                f"{reason}. The program {out_path} is written (the induction finished) but NOT certified: the "
                f"{flag[2:].replace('-', ' ')} stopped its certification on the test split; {spent}. "
                f"Certify it with `rubricforge certify {out_path} --data HELD_OUT` (a larger {flag} there), or "
                f"re-run induce with a larger {flag}") from error
    elif certify:
        result.not_certified = NOT_CERTIFIED
    if budget is not None:
        result.token_budget = _job_budget(budget, induction)
    return result


def _job_budget(budget: TokenBudget | CostBudget, induction: InductionResult) -> dict[str, Any]:
    """The job's `budget_report`: what the induction's LMs spent (``by_lm``) and the rest, the certification's
    (``other``)."""
    return budget_report(budget, [], by_lm=(induction.token_budget or {}).get("by_lm"))
