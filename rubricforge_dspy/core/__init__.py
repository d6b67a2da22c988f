"""Records every stage shares: trajectories, verdicts, rubric text and criteria, presets, errors.

In: nothing of the package; the standard library and orjson (verdict lines), no DSPy, no numpy
(the import contract forbids DSPy and LM clients here). Out: the records the
loaders produce (`Trajectory`), the record a judge's answer becomes (`Verdict`), the seed rubric and
its criteria, the sizes of the presets, and the one exception hierarchy.

Modules:

- :mod:`.trajectory`: `Trajectory`, `Step`, `Source`, label rules, `TrajectoryFormatError`;
- :mod:`.verdict`: `Verdict`, the verdict-line schema and index (`read_verdicts`, `check_line`);
- :mod:`.evidence_record`: `EvidenceRecord`, what a judge read (a verdict line's ``evidence``), and its shares;
- :mod:`.rubric`: the generic seed rubric and its hash;
- :mod:`.criteria`: a rubric's criteria: parse, validate, attribute a judge's reason to one;
- :mod:`.judge_names`: the floor's judge names and the length give-away rule;
- :mod:`.presets`: the sizes that depend on where the judge runs (`EMBEDDED`, `SERVER`);
- :mod:`.errors`: `RubricForgeError`, `InputError` (exit 2), `ServerError` (exit 3);
- :mod:`.files`: `regular_file`, the one check that a path about to be read is a regular file;
- :mod:`.terminal`: `terminal_safe`, text from a file made safe to print on a terminal;
- ``schemas/``: the JSON Schemas of a trajectory record and a verdict line.
"""

from rubricforge_dspy.core.criteria import (
    Criterion,
    attribute_reason,
    parse_criteria,
    rubric_problems,
    without_criterion,
)
from rubricforge_dspy.core.errors import (
    InputError,
    MissingFileError,
    OutputExistsError,
    RubricForgeError,
    RubricForgeWarning,
    ServerError,
)
from rubricforge_dspy.core.evidence_record import EvidenceRecord, line_evidence
from rubricforge_dspy.core.judge_names import FLOOR, HYBRID, LENGTH_ONLY
from rubricforge_dspy.core.presets import EMBEDDED, LIBRARY, PRESETS, SERVER, Preset, preset_for
from rubricforge_dspy.core.rubric import SEED_RUBRIC, rubric_sha256
from rubricforge_dspy.core.trajectory import (
    ANY_POSITIVE_REWARD,
    FULL_REWARD,
    STEP_KINDS,
    LabelRule,
    Source,
    Step,
    Trajectory,
    TrajectoryFormatError,
    UnlabeledError,
    label_from_reward,
    labeled_only,
    parse_label_rule,
    require_labels,
)
from rubricforge_dspy.core.verdict import (
    PASS_THRESHOLD,
    PassRule,
    Verdict,
    VerdictIndex,
    VerdictLineError,
    check_line,
    read_verdicts,
    token_usage,
    verdict_line,
)

__all__ = [
    # records
    "Trajectory", "Step", "Source", "STEP_KINDS", "LabelRule", "ANY_POSITIVE_REWARD", "FULL_REWARD",
    "parse_label_rule", "label_from_reward", "labeled_only", "require_labels",
    "Verdict", "VerdictIndex", "PASS_THRESHOLD", "PassRule", "read_verdicts", "check_line", "verdict_line",
    "EvidenceRecord", "line_evidence", "token_usage",
    # rubric text and criteria
    "SEED_RUBRIC", "rubric_sha256", "Criterion", "parse_criteria", "attribute_reason", "without_criterion",
    "rubric_problems",
    # judge names, presets
    "FLOOR", "HYBRID", "LENGTH_ONLY", "Preset", "EMBEDDED", "SERVER", "LIBRARY", "PRESETS", "preset_for",
    # errors
    "RubricForgeError", "InputError", "ServerError", "MissingFileError", "OutputExistsError", "RubricForgeWarning",
    "TrajectoryFormatError", "UnlabeledError", "VerdictLineError",
]
