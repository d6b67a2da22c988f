"""The names of the Learn-then-Test methods and p-values (`metrics.risk_control` implements them), here so that
the command line can offer them without importing the statistics (numpy, scipy) before a command runs."""

from __future__ import annotations

__all__ = ["FWER_METHODS", "SEQUENCE_METHODS", "LTT_METHODS", "DEFAULT_METHOD", "P_VALUES"]

FWER_METHODS = ("holm", "bonferroni", "fixed_sequence")
SEQUENCE_METHODS = ("split_fixed_sequence", "fail_first_sequence")
# a fixed sequence in raw grid order starts at "never decide" and stops there: not offered
LTT_METHODS = ("split_fixed_sequence", "holm", "bonferroni", "fail_first_sequence")
DEFAULT_METHOD = "split_fixed_sequence"  # the most coverage at equal validity (evals/bench_cascade.py)
P_VALUES = ("binomial", "hoeffding_bentkus", "betting")
