"""`FitOptions`: everything a cascade fit is asked for but its stages and calibration data, as one frozen record
(`trust.cascade.fit_cascade` takes it; the command line builds one from its flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Sequence

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory
from rubricforge_dspy.metrics.risk_control import (
    DEFAULT_BOUND,
    DEFAULT_FALSE_PASS,
    DEFAULT_METHOD,
    FAIL_LEVELS,
    FALSE_PASS_RATES,
    PASS_LEVELS,
)

__all__ = ["FitOptions"]


@dataclass(frozen=True)
class FitOptions:
    """What a cascade fit certifies and how (`trust.cascade.fit_cascade`).

    Attributes:
        alpha: bound on disagreement among decided items, in (0, 1).
        delta: the guarantee holds with probability at least ``1 - delta``, in (0, 1).
        max_false_pass: beta, the bound on the false-pass rate (`false_pass`) (None: ``alpha / 2`` per stage with
            the per-stage bound, `metrics.risk_methods.FALSE_PASS_RATIO`; not bounded with the pooled one).
        method: ``"ordered_sequence"`` (default, `metrics.risk_methods.DEFAULT_METHOD`), ``"holm"``,
            ``"bonferroni"``, ``"split_fixed_sequence"`` or ``"fail_first_sequence"``
            (`metrics.risk_control.learn_then_test`).
        names: stage names (default `trust.cascade.stage_names`).
        pass_levels, fail_levels: the thresholds of a stage with a continuous confidence; a stage whose
            ``confidence_levels`` are set gets one threshold per level instead.
        stage_costs: cost per item of each stage (default: each stage's ``cost_per_item``), to break ties.
        one_per_task: keep one drawn trial per task (the rest counted as dropped); default: every trial.
        seed: the order of the tasks (betting p-values), the ordering share of the split, the drawn trial.
        p_values: ``"auto"`` (exact binomial with one trial per task, else betting), ``"binomial"``,
            ``"betting"`` or ``"hoeffding_bentkus"``.
        num_threads: threads of each stage's batch.
        label_rule: the rule that made the labels from rewards (``--label-threshold``), stored in the guarantee
            (`trust.cascade.label_rule_record`; a dict is taken as such a record); None: each format's own, as
            the trajectories record it.
        labels: the label file joined onto the trajectories (``--labels``), recorded with the rule.
        bound: ``"per_stage"`` (default: every deciding stage's disagreement and false-pass rate bounded) or
            ``"pooled"`` (over everything decided).
        order_trajectories: labeled trajectories apart from the calibration (the fit split: the tasks the floor
            was fit on), whose out-of-fold confidences order the ``"ordered_sequence"``
            (`trust.cascade.order_confidences`); no task may be in both. None: a label-free order fixed in
            advance.
        order_llm_stages: run the LLM stages on the ordering data (default; one call per ordering item); False:
            they get a label-free position in the order.
        false_pass: which false-pass rate beta bounds: ``"among_failed"`` (default: passes among the failed items
            a stage decides) or ``"among_passes"`` (the share of its passes that are failures); the fit report
            states both (`metrics.risk_control.learn_then_test`).

    Raises:
        InputError: alpha, delta or max_false_pass not a number in (0, 1) (NaN included).
    """

    alpha: float
    delta: float
    max_false_pass: float | None = None
    method: str = DEFAULT_METHOD
    names: Sequence[str] | None = None
    pass_levels: Sequence[float] = PASS_LEVELS
    fail_levels: Sequence[float] = FAIL_LEVELS
    stage_costs: Sequence[float] | None = None
    one_per_task: bool = False
    seed: int = 0
    p_values: str = "auto"
    num_threads: int | None = None
    label_rule: LabelRule | str | float | dict[str, Any] | None = None
    labels: str | None = None
    bound: str = DEFAULT_BOUND
    order_trajectories: Sequence[Trajectory] | None = None
    order_llm_stages: bool = True
    false_pass: str = DEFAULT_FALSE_PASS

    def __post_init__(self) -> None:
        for name in ("alpha", "delta", "max_false_pass"):
            value = getattr(self, name)
            if value is None and name == "max_false_pass":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 < value < 1:
                raise InputError(f"the cascade fit's {name} must be a number in (0, 1), got {value!r}")
        if self.false_pass not in FALSE_PASS_RATES:
            raise InputError(f"the cascade fit's false_pass must be one of {', '.join(FALSE_PASS_RATES)}, got "
                             f"{self.false_pass!r}")

    @classmethod
    def of(cls, **options: Any) -> FitOptions:
        """The options from keyword arguments (a name that is not an option: `InputError` naming it)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"unknown cascade fit option(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**options)
