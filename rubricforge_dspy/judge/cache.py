"""The verdict cache: a repeat judgment of the same text by the same judge is free.

Key: (the judge's fingerprint, sha256 of the rendered trajectory text). The fingerprint
(`rubricforge_dspy.judge.fingerprint.judge_fingerprint`) covers the Signature's instructions and field
texts and types, the demos, the adapter, the LM settings that change an answer (model, endpoint,
temperature, max_tokens, seed, structured-output dialect, max string length), the render
configuration and the package versions: change any of them and the cache misses.

Value: a produced `Verdict` (``passed``, ``score``, ``reason``, ``contradiction``) and what the judge read to say it
(its ``evidence``, `core.verdict.EvidenceRecord`, when known: a replayed verdict's line says what the judge read,
as the first line did; an explorer's reading is not recomputable, so it is stored). Abstentions are
never stored, so a later run asks again. Two back ends, one API (`VerdictCache`): one SQLite file
(stdlib `sqlite3`, never pickles) inside a directory, by default ``<output dir>/.rubricforge_cache/``
(batch judging); or memory, for one process (`VerdictCache.in_memory()`: the judge as a DSPy metric,
`rubricforge_dspy.judge.metric.as_metric`).

This is the one cache that answers judge calls: the batch LM runs with DSPy's own response cache
off (its key ignores the endpoint), and `rubricforge_dspy.lm.engine.make_lm` turns it off by default too.
With ``--no-cache`` nothing answers from a cache.

Integrity. The cache file is untrusted state: each row carries a ``digest``, the sha256 of its key and
its verdict content (`row_digest`); a row whose digest does not match (edited, or copied under another
key) is a miss, counted in ``rejected`` and warned (`VerdictCacheWarning`), never served. Rows of
files written before the digest existed (no ``digest``) are misses too, replaced when re-judged. A
cache file that is not a database (or is malformed) is renamed aside (``<file>.corrupt-<time>``) and a
fresh one is used; one that cannot be opened or written (read-only, unreadable, a directory) is
bypassed: the run keeps its verdicts in memory. Either way one `VerdictCacheWarning` names the file;
the run never fails because of its cache.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from rubricforge_dspy.core.errors import RubricForgeError, RubricForgeWarning
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.verdict import EvidenceRecord, Verdict
from rubricforge_dspy.lm.fingerprint import digest

CACHE_DIRNAME = ".rubricforge_cache"
CACHE_FILENAME = "verdicts-v2.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    judge_fingerprint TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    passed INTEGER NOT NULL,
    score REAL NOT NULL,
    reason TEXT NOT NULL,
    contradiction INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    digest TEXT,
    evidence TEXT,
    PRIMARY KEY (judge_fingerprint, text_sha256)
)
"""


class VerdictCacheWarning(RubricForgeWarning):
    """The verdict cache refused a row whose digest does not match, or set its file aside or bypassed it
    (corrupt, unreadable, read-only); the message names the file."""


class _Rejected(RubricForgeError):
    """A stored row whose digest does not match its key and content (internal: a counted miss)."""


def text_sha256(text: str) -> str:
    """sha256 of the rendered trajectory text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def row_digest(fingerprint: str, text_hash: str, verdict: Verdict) -> str:
    """sha256 of a cache row: its key (judge fingerprint, text hash) and the verdict content it answers
    with (``passed``, ``score``, ``reason``, ``contradiction``, and its ``evidence`` when it has one: a row without
    evidence digests as before evidence was stored). A row edited, or moved to another key, no longer matches."""
    content: list[Any] = [fingerprint, text_hash, bool(verdict.passed), repr(float(verdict.score)), verdict.reason,
                          bool(verdict.contradiction)]
    if verdict.evidence is not None:
        content.append(_evidence_text(verdict.evidence))
    payload = json.dumps(content, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _evidence_text(evidence: EvidenceRecord) -> str:
    """The stored text of a verdict's evidence (canonical JSON of `EvidenceRecord.to_dict`)."""
    return json.dumps(evidence.to_dict(), sort_keys=True, separators=(",", ":"))


class _DiskStore:
    """The SQLite back end: one file in `directory`, the schema above (files without the ``digest``
    column gain it; their rows, without a digest, are misses)."""

    def __init__(self, directory: PathArg):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / CACHE_FILENAME
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(verdicts)")}
            if "digest" not in columns:
                self._db.execute("ALTER TABLE verdicts ADD COLUMN digest TEXT")
            if "evidence" not in columns:
                self._db.execute("ALTER TABLE verdicts ADD COLUMN evidence TEXT")
            self._db.commit()
        except BaseException:
            self._db.close()
            raise

    def load(self, fingerprint: str, text_hash: str) -> Verdict | None:
        row = self._db.execute(
            "SELECT passed, score, reason, contradiction, digest, evidence FROM verdicts "
            "WHERE judge_fingerprint=? AND text_sha256=?",
            (fingerprint, text_hash),
        ).fetchone()
        if row is None or row[4] is None:  # no row, or a row written before digests: a miss
            return None
        try:
            evidence = None if row[5] is None else EvidenceRecord.from_dict(json.loads(row[5]))
            verdict = Verdict(passed=bool(row[0]), score=float(row[1]), reason=str(row[2]),
                              contradiction=bool(row[3]), evidence=evidence)
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise _Rejected(f"unreadable row ({error})") from None
        if row[4] != row_digest(fingerprint, text_hash, verdict):
            raise _Rejected("digest mismatch")
        return verdict

    def save(self, fingerprint: str, text_hash: str, verdict: Verdict) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO verdicts (judge_fingerprint, text_sha256, passed, score, reason, contradiction, "
            "created_at, digest, evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (fingerprint, text_hash, int(verdict.passed), float(verdict.score), verdict.reason,
             int(verdict.contradiction), datetime.now(timezone.utc).isoformat(timespec="seconds"),
             row_digest(fingerprint, text_hash, verdict),
             None if verdict.evidence is None else _evidence_text(verdict.evidence)),
        )
        self._db.commit()

    def count(self) -> int:
        count: int = self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
        return count

    def close(self) -> None:
        self._db.close()

    def __repr__(self) -> str:
        return repr(str(self.directory))


class _MemoryStore:
    """The in-memory back end: what the SQLite file would hold, in a dict, for this process only."""

    directory: None = None
    path: None = None

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], tuple[Verdict, str]] = {}

    def load(self, fingerprint: str, text_hash: str) -> Verdict | None:
        found = self._rows.get((fingerprint, text_hash))
        if found is None:
            return None
        if found[1] != row_digest(fingerprint, text_hash, found[0]):
            raise _Rejected("digest mismatch")
        return found[0]

    def save(self, fingerprint: str, text_hash: str, verdict: Verdict) -> None:
        stored = _stored(verdict)
        self._rows[(fingerprint, text_hash)] = (stored, row_digest(fingerprint, text_hash, stored))

    def count(self) -> int:
        return len(self._rows)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "in_memory"


def _stored(verdict: Verdict) -> Verdict:
    """What either back end keeps of a produced verdict: the LM's answer (``passed``, ``score``,
    ``reason``, ``contradiction``) and what the judge read (``evidence``), exactly the SQLite row, so both answer a
    hit alike."""
    return Verdict(passed=verdict.passed, score=verdict.score, reason=verdict.reason,
                   contradiction=verdict.contradiction, evidence=verdict.evidence)


class VerdictCache:
    """Produced verdicts keyed by (judge fingerprint sha256, rendered-text sha256), on disk or in memory.

    ``VerdictCache(directory)`` keeps them in the directory's SQLite file (created on first use; the
    file of earlier versions, so existing caches still hit); ``VerdictCache.in_memory()`` (or
    ``VerdictCache(None)``) keeps them for this process (the judge as a DSPy metric). Both back ends
    answer the same hits for the same keys, and a change of fingerprint misses in both. Abstentions are never stored.

    Thread-safe. `get_or_compute` makes one computation per key: concurrent requests for a key being
    computed wait for it. Counters: ``hits`` and ``misses`` (of `get` and `get_or_compute`), and
    ``rejected``: rows whose digest did not match (each also a miss; see the module docstring).

    A disk cache that cannot be used is never an error: a corrupt file is renamed aside (``set_aside``
    holds the new name) and replaced; a file or directory that cannot be opened or written is bypassed
    (``bypassed`` is True; verdicts are kept in memory for this process). One `VerdictCacheWarning` each.
    """

    def __init__(self, directory: PathArg | None):
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self.bypassed = False
        self.set_aside: Path | None = None
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, str], threading.Event] = {}
        disk = None if directory is None else Path(directory)
        self._store: _DiskStore | _MemoryStore = _MemoryStore() if disk is None else self._open_disk(disk)
        self.directory = self._store.directory if disk is None or not self.bypassed else disk
        self.path = self._store.path if disk is None or not self.bypassed else disk / CACHE_FILENAME

    def _open_disk(self, directory: Path) -> _DiskStore | _MemoryStore:
        path = directory / CACHE_FILENAME
        try:
            return _DiskStore(directory)
        except sqlite3.DatabaseError as error:
            if _is_corrupt(error) and path.is_file():
                aside = path.with_name(f"{path.name}.corrupt-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}")
                try:
                    path.replace(aside)
                    for suffix in ("-wal", "-shm"):
                        Path(str(path) + suffix).unlink(missing_ok=True)
                    store = _DiskStore(directory)
                except (OSError, sqlite3.Error) as again:
                    return self._bypass(path, f"corrupt ({error}) and could not be replaced ({again})")
                self.set_aside = aside
                warnings.warn(f"verdict cache {path}: not a usable database ({error}); set aside as {aside.name} "
                              "and started empty (verdicts in it will be judged again)", VerdictCacheWarning,
                              stacklevel=4)
                return store
            return self._bypass(path, str(error))
        except OSError as error:
            return self._bypass(path, f"{type(error).__name__}: {error}")

    def _bypass(self, path: Path, why: str) -> _MemoryStore:
        self.bypassed = True
        warnings.warn(f"verdict cache {path}: cannot be used ({why}); bypassed: this run keeps its verdicts in "
                      "memory only. Fix its permissions, or pass --cache-dir/--no-cache", VerdictCacheWarning,
                      stacklevel=5)
        return _MemoryStore()

    def _failed(self, error: Exception) -> None:
        """A disk error during the run (the file became unreadable, read-only or corrupt): bypass from now on."""
        if isinstance(self._store, _DiskStore):
            path = self._store.path
            try:
                self._store.close()
            except sqlite3.Error:
                pass
            self._store = self._bypass(path, f"{type(error).__name__}: {error}")

    def _load(self, fingerprint: str, text_hash: str) -> Verdict | None:
        """The store's row (caller holds the lock); a rejected row or a failing store is a miss."""
        try:
            return self._store.load(fingerprint, text_hash)
        except _Rejected as why:
            self.rejected += 1
            warnings.warn(f"verdict cache {self._store!r}: a row failed its integrity check ({why}); not served, "
                          "judged again (see VerdictCache.rejected for the count)", VerdictCacheWarning, stacklevel=4)
            return None
        except sqlite3.Error as error:
            self._failed(error)
            return None

    def _save(self, fingerprint: str, text_hash: str, verdict: Verdict) -> None:
        try:
            self._store.save(fingerprint, text_hash, verdict)
        except sqlite3.Error as error:
            self._failed(error)
            self._store.save(fingerprint, text_hash, verdict)

    @classmethod
    def in_memory(cls) -> "VerdictCache":
        """A cache held in memory, for this process only (``VerdictCache(None)``)."""
        return cls(None)

    @property
    def on_disk(self) -> bool:
        return isinstance(self._store, _DiskStore)

    def get(self, fingerprint: str, text_hash: str) -> Verdict | None:
        """The cached verdict of this judge fingerprint on this text, or None."""
        with self._lock:
            found = self._load(fingerprint, text_hash)
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
            return found

    def put(self, fingerprint: str, text_hash: str, verdict: Verdict) -> bool:
        """Store a produced verdict; abstentions are refused (returns False)."""
        if verdict.abstained:
            return False
        with self._lock:
            self._save(fingerprint, text_hash, verdict)
        return True

    def get_or_compute(self, fingerprint: str, text_hash: str, compute: Callable[[], Verdict]) -> Verdict:
        """The cached verdict for the key, else ``compute()``'s (stored unless an abstention).

        Concurrent calls for a key being computed wait for the first one: one computation per key. When
        it abstains, a waiting call computes again (abstentions are never answers from the cache)."""
        key = (fingerprint, text_hash)
        while True:
            with self._lock:
                found = self._load(fingerprint, text_hash)
                if found is not None:
                    self.hits += 1
                    return found
                event = self._inflight.get(key)
                if event is None:
                    event = self._inflight[key] = threading.Event()
                    break
            event.wait()
        try:
            verdict = compute()
            with self._lock:
                self.misses += 1
                if not verdict.abstained:
                    self._save(fingerprint, text_hash, verdict)
            return verdict
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            event.set()

    def __len__(self) -> int:
        with self._lock:
            try:
                return self._store.count()
            except sqlite3.Error as error:
                self._failed(error)
                return self._store.count()

    def close(self) -> None:
        try:
            self._store.close()
        except sqlite3.Error:
            pass

    def __enter__(self) -> "VerdictCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.bypassed:
            return f"VerdictCache({str(self.directory)!r}, bypassed)"
        return f"VerdictCache({self._store!r})" if self.on_disk else "VerdictCache.in_memory()"


def _is_corrupt(error: sqlite3.DatabaseError) -> bool:
    """A file that is not an SQLite database, or a malformed one (not a permission or locking problem)."""
    text = str(error).lower()
    return "not a database" in text or "malformed" in text or "corrupt" in text


def open_cache(cache: bool | PathArg | VerdictCache | None, out_path: PathArg | None = None) -> VerdictCache | None:
    """Resolve a `cache` argument: None/False = no cache; True = ``.rubricforge_cache/`` next to
    `out_path`; a path = that directory; a `VerdictCache` = itself."""
    if cache is None or cache is False:
        return None
    if isinstance(cache, VerdictCache):
        return cache
    if cache is True:
        base = Path(out_path).parent if out_path is not None else Path.cwd()
        return VerdictCache(base / CACHE_DIRNAME)
    return VerdictCache(cache)


def input_sha256(inputs: Mapping[str, Any]) -> str:
    """The verdict cache's key of a judge's inputs (`BaseJudge.inputs_of`): the sha256 of the text
    (`judge.cache.text_sha256`, the key of a plain judge), extended with the other inputs (features)."""
    text = inputs.get("trajectory")
    key = text_sha256(text) if isinstance(text, str) else None
    extra = {name: value for name, value in sorted(inputs.items()) if name != "trajectory"}
    return key if key is not None and not extra else digest({"text": key, **extra})
