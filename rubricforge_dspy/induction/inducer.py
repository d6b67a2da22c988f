"""`induce`: the file-writing layer over `RubricInducer.compile`, on lists of labeled `Trajectory` records.

    result = induce(train, val, judge_lm=lm, reflection_lm=lm, config=InductionConfig(budget=200),
                    out_path="programs/p.json")

The search (GEPA, its feedback metric, the guards, selection and operating point) is documented in
`rubricforge_dspy.induction.search`; the DSPy optimizer is `rubricforge_dspy.induction.teleprompter`.
The names of `search` are re-exported here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dspy

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.examples import to_examples
from rubricforge_dspy.evidence.render import RENDER_VERSION
from rubricforge_dspy.induction.guards import ReadingJudge, reading_copy
from rubricforge_dspy.induction.search import (  # noqa: F401 - re-exported: the induction API lived here
    MIN_VAL_ITEMS,
    REFLECTION_PROMPT,
    InductionConfig,
    InductionResult,
    check_induction_data,
    fit_operating_point,
    make_feedback_metric,
    rendered_examples,
    select_candidate,
    sweep_table,
    validation_metrics,
    verdict_outcome,
)
from rubricforge_dspy.induction.teleprompter import RubricInducer
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.lm.budget import TokenBudget
from rubricforge_dspy.lm.fingerprint import package_version
from rubricforge_dspy.lm.pricing import CostBudget
from rubricforge_dspy.program.store import CERTIFICATE_KEY, data_fingerprint, data_ids, freeze

__all__ = ["induce", "freeze_induced", "InductionConfig", "InductionResult", "REFLECTION_PROMPT",
           "make_feedback_metric", "rendered_examples", "validation_metrics", "verdict_outcome"]


def freeze_induced(judge: TrajectoryJudge | ReadingJudge, out_path: str | Path, *, lm_name: str | None = None,
                   parent_rubric_sha256: str | None = None) -> dict[str, Any]:
    """Freeze a judge `RubricInducer.compile` returned at `out_path`, with the induction's manifest
    (settings, sweep, operating point, validation metrics, the data it saw), from ``judge.detailed_results``,
    and the certificate `compile` measured on its testset (``detailed_results.certificate``, when it got a
    testset and ``certify=``): the loaded judge is then certified for that LM.

    Args:
        judge: the compiled judge (its ``detailed_results`` is an `InductionResult`).
        out_path: the program file (``.json``).
        lm_name: the judge LM's name, recorded as ``induced_with_lm``.
        parent_rubric_sha256: the `rubric_sha256` of the program the induction started from (``--init``), if
            any; recorded as ``induction.parent_rubric_sha256`` (earlier manifests: ``parent_program_sha256``).

    Returns:
        The manifest written.

    Raises:
        InputError: the certificate was measured on another rubric than the judge's (it was changed after
            `compile`); nothing is written.
    """
    details: InductionResult = judge.detailed_results
    config = details.config
    if config is None:  # run_search sets it on every result `compile` returns
        raise InputError("the judge's detailed_results has no induction config: freeze a judge that "
                         "RubricInducer.compile returned")
    best = details.best_index
    certificate = details.certificate
    if certificate and certificate.get("rubric_sha256") != rubric_sha256(judge.rubric):
        raise InputError(f"{out_path}: the certificate in judge.detailed_results was measured on another rubric "
                         f"(sha256 {str(certificate.get('rubric_sha256'))[:12]}) than the judge's "
                         f"({rubric_sha256(judge.rubric)[:12]}): the rubric changed after compile; freeze the "
                         "compiled judge as returned, or certify the changed one (`rubricforge certify`)")
    fields: dict[str, Any] = dict(
        lm=lm_name, data_fingerprint=data_fingerprint([*details.train, *details.val]),
        seen=data_ids([*details.train, *details.val]),
        metrics={"val_score": details.sweep[best]["val_score"],
                 "seed_val_agreement": details.sweep[0]["val_agreement"], **details.val_metrics},
        extra={"induction": {"budget": config.budget, "minibatch": config.minibatch, "seed": config.seed,
                             "fp_weight": config.fp_weight, "max_false_pass": config.max_false_pass,
                             "metric_calls": details.metric_calls, "beat_seed": details.beat_seed,
                             "best_candidate": best, "reflection_lm": details.reflection_lm,
                             "train_size": len(details.train), "val_size": len(details.val),
                             "lm_errors": details.lm_errors, "rejected_memorized": len(details.rejected),
                             "reflection_failures": details.reflection_failures,
                             "parent_rubric_sha256": parent_rubric_sha256, "notes": details.notes},
               "sweep": details.sweep, **details.operating_point,
               **({CERTIFICATE_KEY: certificate} if certificate else {})},
    )
    if isinstance(judge, (SegmentsJudge, ExplorerJudge)):
        return _freeze_reader(judge, out_path, **fields)
    return freeze(judge, out_path, **fields)


def _freeze_reader(judge: ReadingJudge, out_path: str | Path, *, lm: str | None, data_fingerprint: str,
                   seen: dict[str, Any], metrics: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Save a long-episode judge (its own JSON document, `judge.save`) with the induction's manifest: the fields a
    program's manifest has (`program.store.build_manifest`) but the single signature, and how it reads."""
    manifest = {
        "rubric": judge.rubric, "rubric_sha256": judge.rubric_sha256, "read": judge.read_mode,
        "reading": judge.reading_settings(),
        "render": {"max_tokens": judge.render_config.max_tokens, "max_step_chars": judge.render_config.max_step_chars,
                   "version": RENDER_VERSION},
        "versions": {"rubricforge_dspy": package_version("rubricforge-dspy"), "dspy": package_version("dspy")},
        "induced_with_lm": lm, "data_fingerprint": data_fingerprint, "data_seen": seen,
        "created_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(), "metrics": metrics, **extra,
    }
    judge.manifest = manifest
    judge.save(out_path)
    return manifest


def induce(
    train: list[Trajectory],
    val: list[Trajectory],
    *,
    judge_lm: dspy.LM,
    reflection_lm: dspy.LM,
    config: InductionConfig = InductionConfig(),
    init: TrajectoryJudge | ReadingJudge | None = None,
    log_dir: str | Path | None = None,
    out_path: str | Path | None = None,
    lm_name: str | None = None,
    token_budget: int | TokenBudget | CostBudget | None = None,
) -> InductionResult:
    """Evolve the rubric of `init` (default: the seed rubric) on `train`, select on `val`, freeze the best.

    `RubricInducer.from_config(config).compile(init, trainset=train, valset=val)` under `judge_lm`, then
    `freeze_induced`. Resumable: re-running with the same `log_dir` continues GEPA from its checkpoint.

    Args:
        train: labeled trajectories GEPA reflects on (minibatches of failures and their symptoms).
        val: labeled trajectories every candidate rubric is scored on; the best is selected there and
            its operating point (calibration, threshold) is fit on it.
        judge_lm: the LM the judge calls (copied with `config.num_threads` connections).
        reflection_lm: the LM GEPA proposes new rubrics with.
        config: budget, minibatch, seed, false-pass weight and the other settings (`InductionConfig`).
        init: the judge to start from (its rubric, render configuration and adapter); default a
            `TrajectoryJudge` with `SEED_RUBRIC`. A `SegmentsJudge` or an `ExplorerJudge` is evolved as such
            (every predictor, no operating point) and frozen in its own format (`load_judge` loads it).
        log_dir: GEPA's checkpoint directory, stamped with the data and settings of this run.
        out_path: when given, the best judge is frozen there (`freeze_induced`) with the induction's manifest.
        lm_name: the judge LM's name, recorded in the manifest as ``induced_with_lm``.
        token_budget: a hard cap on the tokens of every LM call of the induction (`RubricInducer`'s
            ``token_budget``): when the next call could cross it, `BudgetExhausted` is raised and nothing is written.

    Returns:
        An `InductionResult` (the compiled judge's ``detailed_results``): the best judge, the sweep table,
        whether it beat the seed, the manifest written (empty without `out_path`), the candidates the
        memorization guard rejected, the LM error count, notes, and the judge's raw verdicts on `val`.

    Raises:
        InputError: the data cannot work (an empty split, one class only, a budget smaller than one
            validation pass), or `log_dir` belongs to another run or is not an induction log dir.
        JudgeUnavailableError: the judge LM failed too many times in a row, or the reflection LM failed.
        BudgetExhausted: the next LM call could have crossed `token_budget`; no program was written.
    """
    seed = init if init is not None else TrajectoryJudge()
    student: TrajectoryJudge | ReadingJudge
    if isinstance(seed, (SegmentsJudge, ExplorerJudge)):
        student = reading_copy(seed)
    else:
        student = TrajectoryJudge(seed.rubric, render_config=seed.render_config, adapter=seed.adapter)
    student.set_lm(judge_lm)
    inducer = RubricInducer.from_config(config, reflection_lm=reflection_lm, log_dir=log_dir, token_budget=token_budget)
    judge = inducer.compile(student, trainset=to_examples(train), valset=to_examples(val))
    judge.set_lm(None)  # the caller's judge LM is passed per call, as before
    result: InductionResult = judge.detailed_results
    if out_path is not None:
        result.manifest = freeze_induced(judge, out_path, lm_name=lm_name,
                                         parent_rubric_sha256=init.rubric_sha256 if init is not None else None)
    return result
