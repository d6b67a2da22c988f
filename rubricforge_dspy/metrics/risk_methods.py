"""The names of the Learn-then-Test methods, bounds and p-values (`metrics.risk_control` implements them), here so
that the command line can offer them without importing the statistics (numpy, scipy) before a command runs."""

from __future__ import annotations

__all__ = ["FWER_METHODS", "SEQUENCE_METHODS", "LTT_METHODS", "DEFAULT_METHOD", "P_VALUES", "BOUNDS",
           "DEFAULT_BOUND", "FALSE_PASS_RATIO", "FALSE_PASS_RATES", "DEFAULT_FALSE_PASS"]

FWER_METHODS = ("holm", "bonferroni", "fixed_sequence")
SEQUENCE_METHODS = ("ordered_sequence", "split_fixed_sequence", "fail_first_sequence")
# a fixed sequence in raw grid order starts at "never decide" and stops there: not offered
LTT_METHODS = ("ordered_sequence", "holm", "split_fixed_sequence", "bonferroni", "fail_first_sequence")
# the one place the default method is set; evals/bench_cascade.py measures the methods and decides it
DEFAULT_METHOD = "ordered_sequence"
P_VALUES = ("binomial", "hoeffding_bentkus", "betting")
# "per_stage": every stage that decides has its disagreement <= alpha and its false-pass rate <= beta;
# "pooled": the disagreement (and, when asked, the false-pass rate) over everything the cascade decides
BOUNDS = ("per_stage", "pooled")
DEFAULT_BOUND = "per_stage"
# with the per-stage bound and no max_false_pass given, beta = FALSE_PASS_RATIO * alpha. 1: a stage's passes are held
# to the same standard as its verdicts (at most alpha of what it passes is a failure). Measured (docs/CASCADE.md,
# "Power on small multi-agent sets"; evals/results/cascade_table.json): at 1/2 with the rate among the failed items
# decided, no vector that passes can be certified on MINT ALFWorld with 54 calibration tasks by any valid test of
# task means (0 of 20 seeds); evals/results/cascade_false_pass_default.json checks the cascade's false-pass rate
# against the judge alone's at this default.
FALSE_PASS_RATIO = 1.0
# which false-pass rate a stage's bound is on: "among_failed", the false passes over the failed items it decides, or
# "among_passes", the share of its passes that are failures
FALSE_PASS_RATES = ("among_passes", "among_failed")
# "among_passes" by default: a stage's own easy fails never dilute it (they are not among its passes), and its
# denominator, the passes, is what a user reads as credit (docs/CASCADE.md)
DEFAULT_FALSE_PASS = "among_passes"
