"""The verdict cache keeps what the judge read with what it said (issue 40): a hit answers with the stored
``evidence``, both back ends alike; the evidence is under the row's digest (an edited one is a counted, warned
miss); a cache file written before evidence was stored gains the column and its rows still hit."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from rubricforge_dspy.core.verdict import EvidenceRecord, Verdict
from rubricforge_dspy.judge.cache import CACHE_FILENAME, VerdictCache, VerdictCacheWarning, row_digest, text_sha256

CUT = EvidenceRecord(steps=30, whole=16, clipped=14, elided=0, chars_cut=11240, complete=False, read="segments",
                     steps_read=tuple(range(1, 31)))
VERDICT = replace(Verdict.from_answer(True, 0.9, "[1] done"), evidence=CUT)
KEY = ("fp-a", text_sha256("a long episode"))


@pytest.mark.parametrize("where", ["disk", "memory"])
def test_a_hit_answers_with_the_evidence_it_was_stored_with(tmp_path, where):
    cache = VerdictCache(tmp_path / "c") if where == "disk" else VerdictCache.in_memory()
    with cache:
        cache.put(*KEY, VERDICT)
        hit = cache.get(*KEY)
    assert hit == VERDICT and hit.evidence == CUT
    if where == "disk":
        with VerdictCache(tmp_path / "c") as again:  # a later run reads it from the file
            assert again.get(*KEY).evidence == CUT


def test_edited_evidence_is_a_counted_warned_miss(tmp_path):
    with VerdictCache(tmp_path / "c") as cache:
        cache.put(*KEY, VERDICT)
    with sqlite3.connect(tmp_path / "c" / CACHE_FILENAME) as db:
        forged = EvidenceRecord.whole_episode(30, read="segments").to_dict()
        db.execute("UPDATE verdicts SET evidence = ?", (json.dumps(forged, sort_keys=True),))
    with VerdictCache(tmp_path / "c") as cache, pytest.warns(VerdictCacheWarning, match="integrity"):
        assert cache.get(*KEY) is None
        assert cache.rejected == 1


def test_a_cache_file_from_before_evidence_gains_the_column_and_its_rows_still_hit(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    plain = Verdict.from_answer(False, 0.1, "the booking failed")
    with sqlite3.connect(folder / CACHE_FILENAME) as db:  # the schema and digest of the earlier version
        db.execute("CREATE TABLE verdicts (judge_fingerprint TEXT NOT NULL, text_sha256 TEXT NOT NULL, passed INTEGER "
                   "NOT NULL, score REAL NOT NULL, reason TEXT NOT NULL, contradiction INTEGER NOT NULL, created_at "
                   "TEXT NOT NULL, digest TEXT, PRIMARY KEY (judge_fingerprint, text_sha256))")
        db.execute("INSERT INTO verdicts VALUES (?, ?, 0, 0.1, ?, 0, '2026-01-01', ?)",
                   (*KEY, plain.reason, row_digest(*KEY, plain)))
    with VerdictCache(folder) as cache:
        hit = cache.get(*KEY)
        assert hit == plain and hit.evidence is None and cache.rejected == 0
        cache.put(KEY[0], "other", VERDICT)
        assert cache.get(KEY[0], "other").evidence == CUT
