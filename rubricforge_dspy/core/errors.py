"""The one exception hierarchy of the package, and how the command line maps it to exit codes.

- `RubricForgeError`: the root. Every exception class of the package derives from it, except
  `rubricforge_dspy.lm.circuit.CircuitOpen`, a `BaseException` on purpose (see there).
- `InputError` (also a `ValueError`): the user gave something unusable: a data, label, program,
  certificate or predictions file, a flag, a preset, or an output file that belongs to another job.
  `rubricforge` prints ``error: <message>`` and exits **2**. `MissingExtraError` (also an `ImportError`)
  is one: a feature used without the optional extra it needs (``pip install "rubricforge-dspy[ray]"``).
- `ServerError` (also a `RuntimeError`): a service the run needs is not there: an LM or server that
  cannot be reached, a circuit breaker that opened, a Batch API job that failed, a server that would
  not start. `rubricforge` prints ``error: <Type>: <message>`` and exits **3**.
- An `OSError` of the file system (`ENVIRONMENT_ERRNOS`: a full disk, a read-only file or file system,
  permission denied, a path through a regular file) is the environment's, not a bug: ``error: <file>:
  <what> ...`` and exit **2**, like bad input.
- Any other exception reaching the command line is a bug: its traceback is printed and the exit code
  is **1**.
- A question the command answers "no" to (`rubricforge gate`: the candidate may not replace the baseline;
  `rubricforge certify --recheck`: the judge got worse) raises `AnswerIsNo` once the answer is printed:
  ``no: <message>`` and exit **4** (`EXIT_NO`): never 1, which is a bug's.
- A run stopped before its token budget would be crossed (`--token-budget`) raises `BudgetExhausted` once what
  it judged is written: ``stopped: <message>`` and exit **5** (`EXIT_BUDGET`); a re-run with a larger budget
  resumes and judges only the rest.

A `RubricForgeError` that is neither (a judge's answer that is not a verdict, a cut completion) is
handled inside the library; reaching the command line it, too, is a bug.

`RubricForgeWarning` (a `UserWarning`) is the root of the package's warnings.

The second bases (`ValueError`, `RuntimeError`) keep ``except ValueError`` / ``except RuntimeError``
code working.
"""

from __future__ import annotations

import errno
import os

__all__ = ["RubricForgeError", "InputError", "MissingFileError", "OutputExistsError", "MissingExtraError",
           "ServerError", "AnswerIsNo", "BudgetExhausted", "RubricForgeWarning", "RubricForgeDeprecationWarning",
           "missing_file",
           "EXIT_INPUT", "EXIT_SERVER",
           "EXIT_BUG", "EXIT_NO", "EXIT_BUDGET", "EXIT_INTERRUPTED", "ENVIRONMENT_ERRNOS"]

EXIT_BUG = 1          # an unexpected exception: a bug (traceback printed)
EXIT_INPUT = 2        # InputError, or an OSError of the environment (ENVIRONMENT_ERRNOS)
EXIT_SERVER = 3       # ServerError
EXIT_NO = 4           # the answer is no: `gate` refuses the candidate, `certify --recheck` finds it worse
EXIT_BUDGET = 5       # BudgetExhausted: a run stopped before its --token-budget would be crossed (resumable)
EXIT_INTERRUPTED = 130  # KeyboardInterrupt (128 + SIGINT)

# OSError numbers that say the environment refused (disk, permissions, paths), not that the code is wrong.
ENVIRONMENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "ENOTDIR", "EISDIR", "EEXIST",
    "ENAMETOOLONG", "ELOOP", "EMFILE", "ENFILE", "EIO", "ETXTBSY", "EBUSY") if hasattr(errno, name))


class RubricForgeError(Exception):
    """The root of every exception the package raises (`CircuitOpen` aside, which must not be an
    `Exception`). Not raised itself; the command line maps its subclasses to exit codes."""


class InputError(RubricForgeError, ValueError):
    """Bad input from the user (a file, a flag, a program, an output file of another job): the message
    names the file and record or the flag. The command line exits 2."""


class MissingFileError(FileNotFoundError, InputError):
    """A file or directory the user named does not exist (also a `FileNotFoundError`; its message is
    the OS's, ``[Errno 2] No such file or directory: 'PATH'``). The command line exits 2."""


class OutputExistsError(FileExistsError, InputError):
    """An output path exists and is never overwritten (also a `FileExistsError`). The command line exits 2."""


class MissingExtraError(InputError, ImportError):
    """A feature was used without the optional extra it needs (Ray, MLflow, Inspect): the message names
    the ``pip install "rubricforge-dspy[EXTRA]"`` that adds it (also an `ImportError`). The command line
    exits 2. The module that offers the feature imports without the extra; using it raises this."""


def missing_file(path: str | os.PathLike[str]) -> MissingFileError:
    """The `MissingFileError` for `path`, worded like the OS's `FileNotFoundError`."""
    return MissingFileError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


class ServerError(RubricForgeError, RuntimeError):
    """A judge LM or server that cannot be reached or used (unreachable, circuit open, Batch API job
    failed, server would not start). The command line exits 3."""


class AnswerIsNo(RubricForgeError):
    """The answer of a command that asks a question is no: `rubricforge gate` (the candidate may not replace
    the baseline), `rubricforge certify --recheck` (the judge got significantly worse). Not a failure: the
    run worked and its answer is printed; the message says the answer in one line. The command line exits 4
    (`EXIT_NO`), which a CI step reads as "do not deploy"."""


class BudgetExhausted(RubricForgeError):
    """A run stopped before its token budget (`apply.budget.TokenBudget`) would be crossed: every verdict made is
    written, nothing is lost, and a re-run with a larger budget resumes. The command line exits 5
    (`EXIT_BUDGET`)."""


class RubricForgeWarning(UserWarning):
    """The root of the package's warnings."""


class RubricForgeDeprecationWarning(RubricForgeWarning, DeprecationWarning):
    """A name of the package that is renamed or moved: the message names the one to use. A `DeprecationWarning`
    too (filters and tools that look for those see it); the test suite turns it into an error outside
    ``pytest.warns``/``pytest.deprecated_call``, so the package's own tests use current names."""
