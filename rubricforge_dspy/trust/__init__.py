"""Trust: whether a frozen judge may be believed, and may replace another.

In: a frozen program, labeled held-out trajectories or verdict files, an LM. Out: a faithfulness
certificate in the program's manifest, a recheck or gate decision (usable as a CI step), a Goodhart
audit, the floor's cross-validated numbers and a judge's margin over it, and what to label next.

Modules:

- :mod:`.certificate`: compute, format and recheck a certificate from verdict lines;
- :mod:`.certify`: judge a held-out set and write the certificate (`certify_program`, `recheck_program`);
- :mod:`.gate`: the promotion gate: two paired tests, one decision (`gate_programs`, `gate_verdict_files`);
- :mod:`.audit`: the Goodhart audit (the function is ``trust.audit.audit``);
- :mod:`.floor_cv`: the floor on any labeled data, by task-grouped cross-validation;
- :mod:`.floor_margin`: a judge's margin over the floor on the same items (``floor_margin.floor_margin``);
- :mod:`.cascade`: fit a certified cascade's thresholds (Learn-then-Test) and summarize what it did;
- :mod:`.label_next`: rank unlabeled trajectories by what a label would teach.

A function named like its module (``audit``, ``floor_margin``) is not re-exported here, so that the
module stays reachable as ``rubricforge_dspy.trust.<module>``. Names are imported lazily: the
certificate and the gate do not need DSPy.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.trust.certificate": ["compute_certificate", "certificate_for", "format_certificate", "recheck",
                                           "check_held_out", "CertificateError", "describe_program"],
    "rubricforge_dspy.trust.certify": ["certify_program", "recheck_program", "judge_labeled"],
    "rubricforge_dspy.trust.gate": ["gate_programs", "gate_verdict_files", "decide", "pair", "Paired", "GateResult",
                                    "NonInferiority", "GateInputError"],
    "rubricforge_dspy.trust.audit": ["AuditReport", "GoodhartWarning", "sample_for_labeling", "load_labeled"],
    "rubricforge_dspy.trust.floor_cv": ["cross_validate", "floor_report", "format_floor_report", "write_cv_verdicts"],
    "rubricforge_dspy.trust.floor_margin": ["floor_margin_of_records", "FloorMarginError"],
    "rubricforge_dspy.trust.cascade": ["fit_cascade", "cascade_summary", "CascadeCalibrationError",
                                       "CascadeStageError"],
    "rubricforge_dspy.trust.label_next": ["Candidate"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
