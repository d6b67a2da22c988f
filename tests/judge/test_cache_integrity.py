"""The verdict cache is untrusted state (issue 19, item 6): a tampered row is never served, and a
corrupt, unreadable or read-only cache file is named, set aside or bypassed, never a crash."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.cache import CACHE_DIRNAME, CACHE_FILENAME, VerdictCache, VerdictCacheWarning, text_sha256
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.helpers import AIRLINE

PASSED = Verdict.from_answer(True, 0.8, "Booked and confirmed.")
FAILED = {"reason": "The booking call errored.", "passed": False, "score": 0.1}
KEY = ("fp-a", text_sha256("rendered trajectory"))


def _tamper(path, sql: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(sql)


@pytest.mark.parametrize("edit", [
    "UPDATE verdicts SET passed = 1 - passed",
    "UPDATE verdicts SET score = 0.99",
    "UPDATE verdicts SET reason = 'forged: all good'",
    "UPDATE verdicts SET judge_fingerprint = 'fp-b'",  # a row replayed under another judge's key
])
def test_a_tampered_row_is_a_counted_warned_miss(tmp_path, edit):
    with VerdictCache(tmp_path / "c") as cache:
        cache.put(*KEY, PASSED)
        assert cache.get(*KEY) == PASSED
    _tamper(tmp_path / "c" / CACHE_FILENAME, edit)
    key = ("fp-b", KEY[1]) if "fp-b" in edit else KEY
    with VerdictCache(tmp_path / "c") as cache:
        with pytest.warns(VerdictCacheWarning, match="integrity"):
            assert cache.get(*key) is None
            assert (cache.rejected, cache.misses, cache.hits) == (1, 1, 0)
            assert cache.get_or_compute(*key, lambda: PASSED) == PASSED  # judged again, then stored verified
        assert cache.get(*key) == PASSED


def test_a_tampered_row_in_memory_is_not_served():
    cache = VerdictCache.in_memory()
    cache.put(*KEY, PASSED)
    verdict, digest = cache._store._rows[KEY]
    cache._store._rows[KEY] = (Verdict.from_answer(False, 0.0, "forged"), digest)
    with pytest.warns(VerdictCacheWarning):
        assert cache.get(*KEY) is None
    assert cache.rejected == 1


def test_rows_of_a_cache_written_before_digests_are_misses_then_replaced(tmp_path):
    directory = tmp_path / "old"
    directory.mkdir()
    with sqlite3.connect(directory / CACHE_FILENAME) as db:
        db.execute("CREATE TABLE verdicts (judge_fingerprint TEXT NOT NULL, text_sha256 TEXT NOT NULL, "
                   "passed INTEGER NOT NULL, score REAL NOT NULL, reason TEXT NOT NULL, contradiction INTEGER "
                   "NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (judge_fingerprint, text_sha256))")
        db.execute("INSERT INTO verdicts VALUES ('fp', ?, 1, 0.75, 'unverifiable', 0, '2025-01-01T00:00:00+00:00')",
                   (text_sha256("t"),))
    with VerdictCache(directory) as cache:
        assert cache.get("fp", text_sha256("t")) is None and cache.misses == 1
        cache.put("fp", text_sha256("t"), PASSED)
    with VerdictCache(directory) as cache:
        assert cache.get("fp", text_sha256("t")) == PASSED


@pytest.mark.parametrize("content", [b"this is not a database\n" * 200, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_corrupt_cache_file_is_set_aside_with_one_warning(tmp_path, content):
    (tmp_path / "c").mkdir()
    path = tmp_path / "c" / CACHE_FILENAME
    path.write_bytes(content)
    with pytest.warns(VerdictCacheWarning, match=str(path)) as caught:
        cache = VerdictCache(tmp_path / "c")
    assert len([w for w in caught if issubclass(w.category, VerdictCacheWarning)]) == 1
    assert cache.set_aside is not None and cache.set_aside.read_bytes() == content and cache.on_disk
    cache.put(*KEY, PASSED)
    cache.close()
    with VerdictCache(tmp_path / "c") as again:
        assert again.get(*KEY) == PASSED


def test_a_cache_path_that_cannot_be_opened_is_bypassed(tmp_path):
    (tmp_path / "c" / CACHE_FILENAME).mkdir(parents=True)  # a directory where the file should be
    with pytest.warns(VerdictCacheWarning, match="bypassed"):
        cache = VerdictCache(tmp_path / "c")
    assert cache.bypassed and not cache.on_disk and str(tmp_path / "c") in repr(cache)
    cache.put(*KEY, PASSED)
    assert cache.get(*KEY) == PASSED  # kept in memory for this run


def test_a_cache_dir_that_is_a_file_is_bypassed(tmp_path):
    (tmp_path / "c").write_text("not a directory")
    with pytest.warns(VerdictCacheWarning, match="bypassed"):
        cache = VerdictCache(tmp_path / "c")
    assert cache.bypassed


def test_a_read_only_database_is_bypassed(tmp_path, monkeypatch):
    """sqlite's answer for a read-only file or directory (root ignores file modes, so it is injected)."""
    real = sqlite3.connect

    class ReadOnly:
        def __init__(self, *a, **k):
            self._db = real(*a, **k)

        def execute(self, sql, *args):
            if sql.lstrip().upper().startswith(("CREATE", "INSERT", "ALTER", "PRAGMA JOURNAL")):
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return self._db.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._db, name)

    monkeypatch.setattr(sqlite3, "connect", ReadOnly)
    with pytest.warns(VerdictCacheWarning, match="readonly"):
        cache = VerdictCache(tmp_path / "c")
    assert cache.bypassed


def test_a_cache_that_fails_during_the_run_is_bypassed_from_then_on(tmp_path):
    cache = VerdictCache(tmp_path / "c")
    cache.put(*KEY, PASSED)
    cache._store._db.close()  # the file goes away under the run (any sqlite error alike)
    with pytest.warns(VerdictCacheWarning, match="bypassed"):
        assert cache.get(*KEY) is None
    cache.put(*KEY, PASSED)
    assert cache.bypassed and cache.get(*KEY) == PASSED


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file modes")
def test_a_read_only_cache_dir_is_bypassed(tmp_path):
    (tmp_path / "c").mkdir()
    VerdictCache(tmp_path / "c").close()
    os.chmod(tmp_path / "c" / CACHE_FILENAME, 0o444)
    os.chmod(tmp_path / "c", 0o555)
    try:
        with pytest.warns(VerdictCacheWarning):
            cache = VerdictCache(tmp_path / "c")
            cache.put(*KEY, PASSED)
        assert cache.bypassed
    finally:
        os.chmod(tmp_path / "c", 0o755)


# -- end to end: `rubricforge judge` against a fake OpenAI-compatible server on 127.0.0.1

def _judge(out, fake) -> int:
    return main(["judge", "--data", str(AIRLINE), "--limit", "3", "--out", str(out), "--concurrency", "1",
                 "--api-base", fake.url + "/v1", "--model", "fake-judge-r1"])


def test_judge_never_serves_a_tampered_cache_row(tmp_path):
    out = tmp_path / "first.jsonl"
    with FakeOpenAI(lambda body, n: FAILED) as fake:
        assert _judge(out, fake) == 0
        _tamper(tmp_path / CACHE_DIRNAME / CACHE_FILENAME, "UPDATE verdicts SET passed = 1, score = 0.99")
        with pytest.warns(VerdictCacheWarning, match="integrity"):
            assert _judge(tmp_path / "second.jsonl", fake) == 0
        assert fake.n_requests == 6  # every tampered row judged again
    second = [json.loads(x) for x in (tmp_path / "second.jsonl").read_text().splitlines()]
    assert len(second) == 3 and not any(x["passed"] for x in second)


@pytest.mark.parametrize("breakage", ["corrupt", "directory"])
def test_judge_runs_through_a_broken_cache_with_a_named_warning(tmp_path, breakage, capsys):
    cache_file = tmp_path / CACHE_DIRNAME / CACHE_FILENAME
    if breakage == "corrupt":
        cache_file.parent.mkdir()
        cache_file.write_bytes(b"garbage, not sqlite\n" * 100)
    else:
        cache_file.mkdir(parents=True)
    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(lambda body, n: FAILED) as fake:
        with pytest.warns(VerdictCacheWarning, match=str(cache_file)):
            assert _judge(out, fake) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3 and not any(x["abstained"] for x in lines)
    if breakage == "corrupt":
        assert [p.name for p in cache_file.parent.iterdir() if ".corrupt-" in p.name]
