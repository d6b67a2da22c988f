"""Program: the frozen judge as a file, and whether its certificate still covers the judge about to run.

In: a judge's state (its Signature, demos and, for a hybrid judge, the stack) and manifest fields.
Out: a JSON program file (never a pickle) whose manifest pins the rubric by its sha256 and records
versions, the LM, the data fingerprint, metrics and the certificate; and the drift check a loaded judge
runs when it first runs with an LM.

Modules:

- :mod:`.store`: write (`freeze`), read (`read_program`) and update the program file and its manifest, and the
  sealed documents of the segments and explorer judges (`read_manifest` reads either's manifest);
- :mod:`.drift`: the certificate drift check and `UncertifiedJudgeWarning` (imports DSPy).

Names are imported lazily: reading a program file does not import DSPy.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.program.store": ["freeze", "save_judge", "read_program", "read_manifest", "update_manifest",
                                       "build_manifest",
                                       "data_fingerprint", "ProgramError", "MANIFEST_KEY", "CERTIFICATE_KEY",
                                       "FORMAT_VERSION", "program_sha256", "UnverifiedProgramWarning",
                                       "MAX_PROGRAM_BYTES"],
    "rubricforge_dspy.program.drift": ["UncertifiedJudgeWarning", "check_drift", "check_render_version"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
