"""The one check of a path the package is about to read: it must be a regular file (or, where a
directory of files is accepted, a directory); and its twin for a path about to be written.

A FIFO, a socket or a device named where a file is expected would block a read forever (a FIFO with no
writer), or read something that is not the user's file (``/dev/zero`` never ends). `regular_file` looks at
the path with ``stat`` (which never blocks, and follows a symlink to what it points to) before anything
opens it, and refuses anything else with an `InputError` naming the path, what it is, and what to do.
Every reader of a user's path calls it: data files and the files of a data directory, label files,
programs and floor files, verdict files. `writable_file` checks an output path the same way before
anything is paid for: a regular file that can be written (or none yet), in a directory that can be made.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from rubricforge_dspy.core.errors import InputError, missing_file

__all__ = ["NotARegularFileError", "regular_file", "writable_file", "file_kind", "PathArg"]

#: What a path argument may be: a `str` or anything `os.fspath` turns into one (a `Path`).
PathArg = str | os.PathLike[str]


class NotARegularFileError(InputError):
    """A path that was to be read names a FIFO, a socket, a device (or a directory where a file is
    expected). ``problem`` is the message without the path. The command line exits 2."""

    def __init__(self, path: PathArg, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` describes, in words ("a regular file", "a FIFO (named pipe)", ...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path: PathArg, what: str = "file", directory: bool = False) -> Path:
    """`path` as a `Path`, once ``stat`` shows a regular file (or a directory, when `directory`).

    The check never opens the path, so it cannot block on a FIFO. A symlink is followed: what it points
    to is checked (docs/SECURITY.md says what that does and does not promise).

    Args:
        path: the path the caller is about to read.
        what: what the file is for the user ("program", "labels file", "data file"), used in the message.
        directory: accept a directory too (data may be a directory of files, each checked in turn).

    Returns:
        ``Path(path)``.

    Raises:
        MissingFileError: nothing is at `path` (or a symlink to nothing).
        NotARegularFileError: `path` is a FIFO, a socket, a device, or a directory where none is accepted.
        InputError: `path` cannot be looked at (permission denied on a parent directory, a name too long).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise missing_file(path) from None
    except OSError as error:
        raise InputError(f"{path}: cannot read the {what}: {error.strerror}") from None
    if stat.S_ISREG(mode) or (directory and stat.S_ISDIR(mode)):
        return path
    wanted = "a regular file or a directory" if directory else "a regular file"
    raise NotARegularFileError(path, f"the {what} is {file_kind(mode)}, not {wanted}: refusing to read it "
                                     f"(a FIFO or a device can block or never end); give the path of {wanted}")


def writable_file(path: PathArg, what: str = "output") -> Path:
    """`path` as a `Path`, once it can be written: nothing there yet, or a regular file this process may
    write (opened for appending and closed at once: nothing changes); missing parent directories are
    created, and a file is created and removed in them to be sure. A symlink is followed (an output that
    must not be one is refused by its caller first, `apply.job.checked_output`).

    Args:
        path: the file a command is about to write.
        what: what the file is for the user ("program", "output"), used in the message.

    Returns:
        ``Path(path)``.

    Raises:
        NotARegularFileError: `path` is a directory, a FIFO, a socket or a device.
        InputError: `path` cannot be written (read-only, on a read-only file system), or its directory
            cannot be made or written (a parent is a regular file, no permission).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        raise InputError(f"{path}: cannot write the {what}: a parent of it is a file, not a directory; choose "
                         "a path in a directory") from None
    except OSError as error:
        raise InputError(f"{path}: cannot write the {what}: {error.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise NotARegularFileError(path, f"the {what} is {file_kind(mode)}, not a regular file; give a file's path")
    try:
        if mode is not None:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path.parent).close()
    except (FileExistsError, NotADirectoryError):
        raise InputError(f"{path}: cannot write the {what}: a parent of it is a file, not a directory; choose "
                         "a path in a directory") from None
    except OSError as error:
        raise InputError(f"{path}: cannot write the {what}: {error.strerror}; make it (or its directory) "
                         "writable, or choose another path") from None
    return path
