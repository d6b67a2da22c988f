"""The verdict cache: a repeat judgment of the same text by the same program and model is free.

Key: (program_sha256 = the frozen program's rubric sha256, model name, sha256 of the rendered
trajectory text). Value: the verdict (`passed`, `score`, `reason`). Stored in one SQLite file
(stdlib `sqlite3`, never pickles) inside a directory, by default ``<output dir>/.rubricforge_cache/``.

Only well-formed verdicts are stored: abstentions (timeouts, server errors, unparsable output) are
never cached, so a later run asks again. What is *not* in the key: LM sampling settings
(temperature, max_tokens), the adapter, and demos; change one of those and use another cache
directory (or none).

Interplay with DSPy's own response cache (``dspy.LM(cache=True)``, keyed by model name and messages,
ignoring `api_base`): when `judge_stream` is given a verdict cache it turns DSPy's cache off for
the batch LM, so this cache is the single source of truth and every miss is a real LM call.

The cache is used from one thread (the batch writer); it is not meant to be shared across threads.
"""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

CACHE_DIRNAME = ".rubricforge_cache"
CACHE_FILENAME = "verdicts.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    program_sha256 TEXT NOT NULL,
    model TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    passed INTEGER NOT NULL,
    score REAL NOT NULL,
    reason TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (program_sha256, model, text_sha256)
)
"""


def text_sha256(text: str) -> str:
    """sha256 of the rendered trajectory text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VerdictCache:
    """A directory holding ``verdicts.sqlite3``; created on first use."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / CACHE_FILENAME
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self._db.commit()
        self.hits = 0
        self.misses = 0

    def get(self, program_sha256: str, model: str | None, text_hash: str) -> dict | None:
        """The cached verdict ``{"passed", "score", "reason"}``, or None."""
        row = self._db.execute(
            "SELECT passed, score, reason FROM verdicts WHERE program_sha256=? AND model=? AND text_sha256=?",
            (program_sha256, model or "", text_hash),
        ).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return {"passed": bool(row[0]), "score": float(row[1]), "reason": row[2]}

    def put(self, program_sha256: str, model: str | None, text_hash: str, verdict: dict) -> bool:
        """Store a well-formed verdict; abstentions are refused (returns False)."""
        if verdict.get("abstained") or verdict.get("error"):
            return False
        self._db.execute(
            "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
            (program_sha256, model or "", text_hash, int(bool(verdict["passed"])), float(verdict["score"]),
             str(verdict.get("reason") or ""), datetime.now(timezone.utc).isoformat(timespec="seconds")),
        )
        self._db.commit()
        return True

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "VerdictCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VerdictCache({str(self.directory)!r})"


def open_cache(cache, out_path=None) -> VerdictCache | None:
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
