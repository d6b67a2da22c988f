"""One writer per file: the lock a run holds on the file it appends to, keyed on the file's identity.

`output_lock` holds, for the whole run, an exclusive ``flock`` on ``OUT.lock`` beside the real path of ``OUT``
(the holder's pid written in it) and one on ``OUT`` itself, which the kernel keys on the inode: a run reaching the
same file under another name (a hard link made later, a rename) is refused with the holder's pid. `checked_output`
refuses at once an ``OUT`` that is a symlink, has several names (hard links), or is not a regular file.
`check_owned` checks that a descriptor about to be written is the locked file; `replace_file` writes a side file
(the job file, the done index, a batch's state) whole to a new file renamed into place, never through a link.
The kernel releases the locks when their process dies, so a killed run never blocks a re-run. Used by
`apply.job` (verdict files and their job) and by the review page's labels journal.
"""


from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg, file_kind, writable_file

__all__ = ["LOCK_SUFFIX", "OutputLockedError", "checked_output", "check_owned", "lock_path", "output_lock",
           "replace_file", "new_file", "write_all", "relock"]

LOCK_SUFFIX = ".lock"


class OutputLockedError(InputError):
    """Another process is writing the same output file right now. The command line exits 2."""



# -- one writer per output file ----------------------------------------------------------------

def checked_output(out_path: PathArg) -> Path:
    """The output file ``OUT`` as the lock knows it: its real directory (symlinks in it resolved) and its
    name, once checked, before anything is paid: ``OUT`` is a regular file with one name this process may
    append to, or does not exist yet (its directory is created).

    Args:
        out_path: the output file a run is about to write.

    Returns:
        ``realpath(dirname(OUT)) / basename(OUT)``: one path per file, whichever name reached it.

    Raises:
        InputError: ``OUT`` is a symlink (two runs could write one file through a link and its target), a
            regular file with several names (hard links: the same), a directory, a FIFO or a device, a file
            that cannot be written (read-only, on a read-only file system), or its directory cannot be
            created (a parent is a regular file, no permission).
    """
    out = Path(out_path)
    try:
        st = os.lstat(out)
    except OSError:
        st = None  # nothing there, or not reachable: `writable_file` says which
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise InputError(f"{out}: the output is a symlink (to {os.readlink(out)}); give the path of the file "
                         "itself: through a link and its target, two runs would write one file at once")
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise _linked(out, st.st_nlink)
    writable_file(out, "output")
    parent = out.parent
    return Path(os.path.realpath(parent)) / out.name


def _linked(out: PathArg, names: int) -> InputError:
    return InputError(f"{out}: the output has {names} names (hard links); through two of them two runs would "
                      f"write one file at once: use a copy of it (cp {out} NEW) or another path, or remove its "
                      "other names")


def _inode_holder(st: os.stat_result) -> str:
    """The pid holding a flock on the file `st` describes, from ``/proc/locks`` (Linux), else "unknown"."""
    try:
        with open("/proc/locks") as handle:
            rows = handle.read().splitlines()
    except OSError:
        return "unknown"
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for row in rows:
        fields = row.split()
        if "->" in fields or "FLOCK" not in fields:
            continue  # a waiter, or a POSIX lock: not ours to report
        at = fields.index("FLOCK")
        if len(fields) > at + 4 and fields[at + 4] == wanted and fields[at + 3] != str(os.getpid()):
            return fields[at + 3]
    return "unknown"


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never a link, never blocks (a FIFO)


def _own_file(out: Path, shown: PathArg) -> tuple[int, bool]:
    """The output's own descriptor, holding the flock of its inode, and whether this call created the file.

    Opened without following a symlink; then checked on the descriptor (a regular file with one name) and
    against the path (it still names this file), so a link or a swap made after `checked_output` is seen."""
    while True:
        created = True
        try:
            fd = os.open(out, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            created = False
            try:
                fd = os.open(out, _OPEN_FLAGS)
            except FileNotFoundError:
                continue  # removed between the two opens: create it
            except OSError as error:
                raise _refused_open(out, shown, error) from None
        except OSError as error:
            raise _refused_open(out, shown, error) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{shown}: the output became {file_kind(st.st_mode)} after it was checked; "
                                 "give a regular file's path")
            if st.st_nlink > 1:
                raise _linked(shown, st.st_nlink)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise InputError(f"{shown}: cannot lock the output: {error.strerror}") from None
                raise OutputLockedError(
                    f"{shown} is being written by another process under another name (pid {_inode_holder(st)}; "
                    "the file was renamed or hard-linked while it was written). Two runs on one file would judge "
                    "every item twice: wait for it to finish, stop it, or use another path") from None
            if _same_file(out, st):
                return fd, created
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the name was given to another file between our open and our lock: own that one


def _refused_open(out: Path, shown: PathArg, error: OSError) -> InputError:
    if error.errno == errno.ELOOP:
        return InputError(f"{shown}: the output became a symlink after it was checked; give the path of the file "
                          "itself")
    return InputError(f"{shown}: cannot open the output {out}: {error.strerror}")


def _same_file(path: Path, st: os.stat_result) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


class _Held:
    """A lock this process holds: how many `output_lock` blocks hold it (run_judge_file -> judge_stream),
    the output file it locks (`checked_output`'s path) and the descriptor holding that file's flock."""

    def __init__(self, out: Path, fd: int):
        self.out, self.fd, self.depth = out, fd, 1


def _held_for(out_path: PathArg) -> _Held | None:
    out = Path(out_path)
    key = str(lock_path(Path(os.path.realpath(out.parent)) / out.name))
    with _HELD_GUARD:
        return _HELD.get(key)


def check_owned(out_path: PathArg, fd: int) -> None:
    """Check that the descriptor `fd`, opened on `out_path` to write it, is the file whose lock this process
    holds (`output_lock`), with one name: nothing when no lock of `out_path` is held here.

    Raises:
        InputError: `fd` is another file (``OUT`` was replaced after it was locked) or has several names.
    """
    held = _held_for(out_path)
    if held is None:
        return
    st, ours = os.fstat(fd), os.fstat(held.fd)
    if (st.st_dev, st.st_ino) != (ours.st_dev, ours.st_ino):
        raise InputError(f"{out_path}: the output was replaced by another file after this run locked it; "
                         "nothing was written to it: run again")
    if st.st_nlink > 1:
        raise _linked(out_path, st.st_nlink)


def relock(out_path: PathArg, fd: int) -> None:
    """`out_path` now names the file open as `fd`, whose flock `fd` holds (its rewrite, renamed into place):
    it becomes the held file lock of `out_path` (the old file's is released); `fd` is closed when no lock of
    `out_path` is held here."""
    held = _held_for(out_path)
    if held is None:
        os.close(fd)
        return
    old, held.fd = held.fd, fd
    os.close(old)


_HELD: dict[str, _Held] = {}  # lock files this process holds (name locks, by path) -> the lock
_HELD_GUARD = threading.Lock()


def lock_path(out_path: PathArg) -> Path:
    """``OUT.lock``: the file `output_lock` locks beside the output ``OUT``."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + LOCK_SUFFIX)


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode("ascii", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


def _acquire(path: Path, out_path: PathArg) -> int:
    """An open descriptor of `path` holding its exclusive flock (the path still names the locked file)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise InputError(f"{out_path}: cannot create the lock file {path}: {error.strerror}; "
                             "choose an --out in a writable directory") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _holder(fd)
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InputError(f"{out_path}: cannot lock {path}: {error.strerror}") from None
            raise OutputLockedError(
                f"{out_path} is being written by another process (pid {holder}, lock {path}). Two runs on one "
                "output would judge every item twice: wait for it to finish, stop it, or use another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed the file between our open and our lock: lock the new one


@contextmanager
def output_lock(out_path: PathArg) -> Iterator[Path]:
    """Hold the exclusive locks of `out_path` for the ``with`` block: its name's (``OUT.lock``) and its file's
    (a `fcntl.flock` on ``OUT`` itself, which is created when missing); see the module docstring.

    The holder's pid is written in the lock file, so a refused run can name it. Re-entrant within one
    process (the locks are taken once); released (and the lock file removed) on exit, and by the kernel
    if the process dies, so a killed run never blocks the next one. An ``OUT`` this block created is removed
    when the block ends by an exception with the file still empty.

    Args:
        out_path: the output file to own.

    Yields:
        The lock file's path.

    Raises:
        OutputLockedError: another process holds either lock (the message names the file and its pid),
            whichever name of the file it reached it by.
        InputError: the output is refused by `checked_output` (a symlink, not a regular file, several names,
            not writable, no directory for it), or became one of those after the check, or the lock file
            cannot be created.
    """
    out = checked_output(out_path)
    path = lock_path(out)  # the name's lock, whichever name of the directory reached it
    key = str(path)
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None:
            held.depth += 1
    if held is not None:
        try:
            yield path
        finally:
            with _HELD_GUARD:
                held.depth -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, out_path)
    held = None
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as error:  # e.g. a full disk: say which file, before anything is paid
            raise OSError(error.errno, error.strerror, str(path)) from error
        own, created = _own_file(out, out_path)  # the file's lock, whichever name reached it
        held = _Held(out, own)
        with _HELD_GUARD:
            _HELD[key] = held
        before = _side_files(out) if created else set()
        try:
            yield path
        except BaseException:
            if created and _remove_if_empty(out, held.fd):  # refused or failed before a byte: as if never started,
                for side in _side_files(out) - before - {path}:  # so no side file it made (OUT.ids...) stays
                    side.unlink(missing_ok=True)
            raise
        finally:
            with _HELD_GUARD:
                _HELD.pop(key, None)
            try:
                path.unlink()  # still holding the lock: a waiting process re-checks the inode and retries
            except OSError:
                pass
    finally:
        if held is not None:
            os.close(held.fd)
        os.close(fd)


def _remove_if_empty(out: Path, fd: int) -> bool:
    """Remove `out`, created by `output_lock`, when it is still that file and empty; True when removed."""
    try:
        st = os.fstat(fd)
        if st.st_size == 0 and _same_file(out, st):
            out.unlink()
            return True
    except OSError:
        pass
    return False


def _side_files(out: Path) -> set[Path]:
    """The regular files beside `out` named ``OUT.<something>`` (its done index, job file, queue...)."""
    try:
        with os.scandir(out.parent) as entries:
            return {Path(entry.path) for entry in entries
                    if entry.name.startswith(out.name + ".") and entry.is_file(follow_symlinks=False)}
    except OSError:
        return set()


def new_file(path: Path, append: bool = False) -> int:
    """A descriptor writing a file created now at `path` (whatever was there, a link included, is removed
    first): a temporary written and renamed into place is never another name of someone's file."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | (os.O_APPEND if append else 0),
                   0o644)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (as many `os.write` calls as it takes)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def replace_file(target: Path, data: bytes, keep: bool = False) -> int | None:
    """Write `data` to a new file (``TARGET.tmp``, created now) renamed onto `target`: atomic, and never
    written through another name of a file (a link at either name is replaced, not followed).

    Args:
        target: the file to replace (or create).
        data: its new bytes.
        keep: return the new file's descriptor, open for appending, so later appends reach the file renamed
            into place and no other (the caller closes it).

    Returns:
        The descriptor with `keep`, else None.
    """
    temporary = target.with_name(target.name + ".tmp")
    fd = new_file(temporary, append=True)
    try:
        write_all(fd, data)
        os.fsync(fd)  # on disk before the rename: a crash leaves the old file or the new one, never an empty one
        os.replace(temporary, target)
    except BaseException:
        os.close(fd)
        raise
    if keep:
        return fd
    os.close(fd)
    return None


