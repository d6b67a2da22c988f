"""GEPA's checkpoint in an induction ``--log-dir``, kept so that resuming never unpickles a file someone else wrote.

GEPA saves its search state as a pickle (``gepa_state.bin``) in its run dir and, given the same run dir
again, unpickles it to resume: whoever can write that file runs code in the resuming process. A hash of
the file recorded next to it protects nothing (whoever plants the file rewrites the hash too). So:

- GEPA never gets the user's log dir as its run dir. It works in a private directory
  (`tempfile.mkdtemp`: mode 0700, removed when the search ends) that only this process writes.
- After each of GEPA's saves, `GEPACheckpoint` copies the state into the log dir and records in the run
  marker (``rubricforge_run.json``) an HMAC-SHA256 tag of it, keyed by a secret that lives outside the
  log dir (`checkpoint_key`: ``checkpoint.key`` in `config_dir`, created 0600 on first use) and bound to
  the run's fingerprint. GEPA's JSON outputs (``candidates.json``, ``run_log.json``, ...) are copied too.
- On resume the log dir's state is read once, its tag checked with the key, and only those verified
  bytes are written into the private directory GEPA reads. A state without a tag that verifies is refused
  (`InputError`) and never unpickled: editing the marker does not help without the key.
- Nothing in the log dir is read before it is known to be a regular file (the marker by
  `core.files.regular_file`, the state opened without blocking and checked on its descriptor): a FIFO there
  would block ``induce`` forever. A ``--log-dir`` that exists and is not a directory is refused by name.

A checkpoint therefore resumes only on an account that holds the key that tagged it (copying a log dir
to another machine or user means starting again; the data and settings are in the marker).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import NotARegularFileError, file_kind, regular_file

logger = logging.getLogger(__name__)

__all__ = ["CONFIG_DIR_ENV", "GEPACheckpoint", "GEPA_STATE", "KEY_FILE", "RUN_MARKER", "STATE_TAG_KEY",
           "checkpoint_key", "config_dir", "state_tag"]

RUN_MARKER = "rubricforge_run.json"
GEPA_STATE = "gepa_state.bin"
STATE_TAG_KEY = "gepa_state_hmac"  # the tags of the last two states copied to the log dir, newest first
LEGACY_SHA_KEY = "gepa_state_sha256"  # what older versions recorded: not a proof of anything, so not accepted
CONFIG_DIR_ENV = "RUBRICFORGE_CONFIG_DIR"
KEY_FILE = "checkpoint.key"
_TAG_DOMAIN = b"rubricforge gepa checkpoint v1\x00"


def config_dir() -> Path:
    """The user's RubricForge config directory: ``$RUBRICFORGE_CONFIG_DIR``, else
    ``$XDG_CONFIG_HOME/rubricforge``, else ``~/.config/rubricforge``."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "rubricforge"


def _check_private(path: Path, what: str) -> os.stat_result:
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: the {what} is not a regular file; remove it (a new key is made on the next run)")
    if os.name == "posix":
        if info.st_uid != os.getuid():
            raise InputError(f"{path}: the {what} belongs to another user (uid {info.st_uid}); remove it, or set "
                             f"{CONFIG_DIR_ENV} to a directory of your own")
        if info.st_mode & 0o077:
            raise InputError(f"{path}: the {what} can be read or written by other users (mode "
                             f"{stat.S_IMODE(info.st_mode):o}); run `chmod 600 {path}`, or remove it to make a "
                             "new one (checkpoints it tagged will then be refused)")
    return info


def checkpoint_key(directory: Path | None = None) -> bytes:
    """The secret that tags GEPA checkpoints: ``checkpoint.key`` in `directory` (default `config_dir`),
    created on first use (the directory 0700, the file 0600, written whole before it appears).

    Raises:
        InputError: the key file is not a regular file, not the user's own, readable or writable by
            others, or malformed; or it cannot be created.
    """
    directory = config_dir() if directory is None else Path(directory)
    path = directory / KEY_FILE
    if not os.path.lexists(path):
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=".checkpoint-key-", dir=directory)  # 0600, O_EXCL
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_hex(32) + "\n")
                try:
                    os.link(temporary, path)  # appears whole, and never replaces a key another process made
                except FileExistsError:
                    pass
            finally:
                os.unlink(temporary)
        except OSError as error:
            raise InputError(f"{path}: cannot create the key that protects GEPA checkpoints ({error}); set "
                             f"{CONFIG_DIR_ENV} (or XDG_CONFIG_HOME) to a private directory you can write") from error
        logger.info("created the GEPA checkpoint key %s", path)
    _check_private(path, "GEPA checkpoint key")
    try:
        text = path.read_text().strip()
        key = bytes.fromhex(text)
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: unreadable GEPA checkpoint key ({error}); remove it to make a new one") from error
    if len(key) < 32:
        raise InputError(f"{path}: the GEPA checkpoint key is too short ({len(key)} bytes); "
                         "remove it to make a new one")
    return key


def state_tag(key: bytes, fingerprint: dict[str, Any], data: bytes) -> str:
    """HMAC-SHA256 of a GEPA state's bytes under `key`, bound to the run's `fingerprint` (the marker's
    data fingerprints, seed rubric and settings), as hex."""
    mac = hmac.new(key, _TAG_DOMAIN, hashlib.sha256)
    mac.update(json.dumps(fingerprint, sort_keys=True).encode())
    mac.update(b"\x00")
    mac.update(data)
    return mac.hexdigest()


def _read_regular(path: Path) -> bytes:
    """The bytes of `path`, which must be a regular file (not a link, FIFO or device), read once."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise InputError(f"{path}: cannot read the GEPA checkpoint ({error}); refusing to resume from it") from error
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode  # (opened without blocking: a FIFO is seen here, never read)
        if not stat.S_ISREG(mode):
            raise NotARegularFileError(path, f"the GEPA checkpoint is {file_kind(mode)}, not a regular file; "
                                             "refusing to resume from it")
        return handle.read()


def _write_atomic(target: Path, data: bytes) -> None:
    """`data` into `target` through a fresh temporary file beside it (created exclusively, so a planted
    link is never followed) renamed over it (a link at `target` is replaced, not followed)."""
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, target)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def _write_marker(marker: Path, data: dict[str, Any]) -> None:
    _write_atomic(marker, json.dumps(data, indent=2, sort_keys=True).encode())


class GEPACheckpoint:
    """GEPA's checkpointing for one induction run with a log dir (module docstring): a context manager
    whose value is the private run dir to give GEPA, and a GEPA callback that copies each saved state
    into the log dir with its tag.

    Entering stamps `log_dir` for this run, or refuses it (`InputError`, before anything is unpickled): a
    log dir written for other data or settings, a non-empty directory that is not an induction log dir,
    or a checkpoint whose tag does not verify under this account's key.

    Args:
        log_dir: the user's ``--log-dir``.
        fingerprint: what identifies the run (data fingerprints, seed rubric hash, settings); JSON.
        key: the tagging secret (default `checkpoint_key()`).
    """

    def __init__(self, log_dir: str | Path, fingerprint: dict[str, Any], *, key: bytes | None = None):
        self.log_dir = Path(log_dir)
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True))  # as the marker stores it
        self._key = key
        self.run_dir: Path | None = None
        self._tags: list[str] = []
        self._copied: dict[str, tuple[int, int]] = {}

    @property
    def marker(self) -> Path:
        return self.log_dir / RUN_MARKER

    def verified_state(self) -> bytes | None:
        """Stamp or check the log dir (class docstring); the log dir's GEPA state when its tag verifies,
        None when there is none."""
        marker, state = self.marker, self.log_dir / GEPA_STATE
        if os.path.lexists(self.log_dir) and not self.log_dir.is_dir():
            kind = file_kind(os.stat(self.log_dir).st_mode) if self.log_dir.exists() else "a link to nothing"
            raise InputError(f"{self.log_dir}: the --log-dir is {kind}, not a directory; give a directory's path "
                             "(made if missing)")
        tags: list[str] = []
        if marker.exists():
            regular_file(marker, "induction run marker")  # a FIFO would block the read below forever
            try:
                previous = json.loads(marker.read_text())
            except (OSError, ValueError, RecursionError) as error:
                raise InputError(f"{marker}: unreadable induction run marker ({error}); "
                                 "use a fresh --log-dir") from error
            if not isinstance(previous, dict):
                raise InputError(f"{marker}: not an induction run marker; use a fresh --log-dir")
            tags = previous.pop(STATE_TAG_KEY, None) or []
            previous.pop(LEGACY_SHA_KEY, None)
            if previous != self.fingerprint:
                raise InputError(f"{self.log_dir}: log dir belongs to a different induction run; use a fresh --log-dir")
        elif self.log_dir.exists() and any(self.log_dir.iterdir()):
            raise InputError(f"{self.log_dir}: not empty and not a RubricForge induction log dir; refusing to resume "
                             "from it")
        key = self.key
        data = None
        if os.path.lexists(state):
            fresh = (f"GEPA checkpoints are pickles: only one tagged by this account's key "
                     f"({config_dir() / KEY_FILE}) is resumed. Start fresh with a new --log-dir, or delete {state} "
                     "to restart this run from the beginning")
            data = _read_regular(state)
            tag = state_tag(key, self.fingerprint, data)
            if not isinstance(tags, list) or not any(isinstance(t, str) and hmac.compare_digest(t, tag) for t in tags):
                raise InputError(f"{state}: no valid HMAC of this GEPA checkpoint is recorded in {marker.name} (the "
                                 "file was changed, replaced or written elsewhere); refusing to unpickle it. " + fresh)
            self._tags = [tag]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _write_marker(marker, {**self.fingerprint, **({STATE_TAG_KEY: self._tags} if self._tags else {})})
        return data

    @property
    def key(self) -> bytes:
        if self._key is None:
            self._key = checkpoint_key()
        return self._key

    def __enter__(self) -> str:
        data = self.verified_state()
        self.run_dir = Path(tempfile.mkdtemp(prefix="rubricforge-gepa-"))
        if data is not None:
            (self.run_dir / GEPA_STATE).write_bytes(data)
            self._copied[GEPA_STATE] = self._signature(self.run_dir / GEPA_STATE)
        return str(self.run_dir)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            self.publish()
        except Exception as error:
            if exc_type is None:
                raise
            # the search already failed: keep its error (the one to act on), say what was not copied
            logger.warning("could not copy GEPA's last checkpoint into %s: %s", self.log_dir, error)
        finally:
            if self.run_dir is not None:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    @staticmethod
    def _signature(path: Path) -> tuple[int, int]:
        info = path.stat()
        return info.st_size, info.st_mtime_ns

    def publish(self) -> None:
        """Copy what GEPA wrote in the private run dir since the last call into the log dir: the state
        with its tag (the marker first lists the new tag beside the previous one, then the state is
        replaced, so an interruption between the two leaves a state that verifies), the other files as
        they are. Links and non-directories in the log dir's way are refused, never followed."""
        if self.run_dir is None or not self.run_dir.exists():
            return
        state = self.run_dir / GEPA_STATE
        if state.exists() and self._copied.get(GEPA_STATE) != self._signature(state):
            signature = self._signature(state)
            data = state.read_bytes()
            tag = state_tag(self.key, self.fingerprint, data)
            self._tags = [tag, *self._tags[:1]]
            _write_marker(self.marker, {**self.fingerprint, STATE_TAG_KEY: self._tags})
            _write_atomic(self.log_dir / GEPA_STATE, data)
            self._copied[GEPA_STATE] = signature
        for directory, _subdirectories, files in os.walk(self.run_dir):
            relative = Path(directory).relative_to(self.run_dir)
            target = self.log_dir / relative
            if relative != Path("."):
                if os.path.islink(target) or (target.exists() and not target.is_dir()):
                    raise InputError(f"{target}: in the way of GEPA's output (a link or a file); remove it")
                target.mkdir(exist_ok=True)
            for name in sorted(files):
                if relative == Path(".") and name == GEPA_STATE or name.endswith(".tmp"):
                    continue
                source = Path(directory) / name
                key = str(relative / name)
                signature = self._signature(source)
                if self._copied.get(key) != signature:
                    _write_atomic(target / name, source.read_bytes())
                    self._copied[key] = signature

    def stop_file(self) -> str:
        """GEPA's stop file in the log dir (``gepa.stop``: create it to end the search after the current
        iteration), for a `gepa.utils.FileStopper`."""
        return str(self.log_dir / "gepa.stop")

    # GEPA callbacks: GEPA saves at the start of each iteration, then calls on_state_saved; and once at the
    # end, before on_optimization_end. GEPA logs a callback's exception as a warning and goes on; leaving the
    # `with` block copies again and raises.
    def on_state_saved(self, event: object) -> None:
        self.publish()

    def on_optimization_end(self, event: object) -> None:
        self.publish()
