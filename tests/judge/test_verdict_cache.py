"""One verdict cache, two back ends: the SQLite file of batch judging and memory (the judge as a metric)."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.judge.cache import VerdictCache, text_sha256
from rubricforge_dspy.judge.metric import as_metric
from rubricforge_dspy.judge.module import TrajectoryJudge
from tests.support.metric import example, judging, run_react, strict_verdict

PASSED = Verdict.from_answer(True, 0.8, "Grounded claims hold.")
CONTRADICTED = Verdict.from_answer(True, 0.2, "says pass, scores a fail")


@pytest.fixture(params=["disk", "memory"])
def cache(request, tmp_path):
    with (VerdictCache(tmp_path / "c") if request.param == "disk" else VerdictCache.in_memory()) as cache:
        yield cache


def both(tmp_path):
    return VerdictCache(tmp_path / "c"), VerdictCache.in_memory()


def test_both_back_ends_answer_the_same_hits_and_misses(tmp_path):
    disk, memory = both(tmp_path)
    text = text_sha256("rendered trajectory")
    for c in (disk, memory):
        c.put("fp-a", text, PASSED.with_operating_point(0.9))
        c.put("fp-a", text_sha256("other"), CONTRADICTED)
    for key in (("fp-a", text), ("fp-a", text_sha256("other"))):
        assert disk.get(*key) == memory.get(*key) is not None
    # a fingerprint change (another rubric, LM setting, render...) misses in both
    assert disk.get("fp-b", text) is None and memory.get("fp-b", text) is None
    assert disk.get("fp-a", text_sha256("never judged")) is None and memory.get("fp-a", text_sha256("x")) is None
    assert (disk.hits, disk.misses) == (memory.hits, memory.misses) == (2, 2)
    assert len(disk) == len(memory) == 2
    assert memory.get("fp-a", text).contradiction is False and memory.get("fp-a", text_sha256("other")).contradiction
    disk.close()


def test_abstentions_are_never_stored(cache):
    abstained = Verdict.abstention("timed out", "timeout")
    assert cache.put("fp", text_sha256("t"), abstained) is False
    assert cache.get("fp", text_sha256("t")) is None and len(cache) == 0
    calls = []

    def compute():
        calls.append(1)
        return abstained

    cache.get_or_compute("fp", text_sha256("t"), compute)
    cache.get_or_compute("fp", text_sha256("t"), compute)
    assert len(calls) == 2 and len(cache) == 0


def test_concurrent_requests_for_one_key_compute_once(cache):
    calls = []
    lock = threading.Lock()

    def compute():
        with lock:
            calls.append(1)
        time.sleep(0.05)
        return PASSED

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: cache.get_or_compute("fp", text_sha256("t"), compute), range(16)))
    assert len(calls) == 1 and all(v.passed and v.score == PASSED.score for v in got)
    assert cache.misses == 1 and cache.hits == 15


def test_as_metric_with_a_disk_cache_keeps_verdicts_across_metrics(tmp_path):
    first_lm = judging(strict_verdict)
    with VerdictCache(tmp_path / "c") as disk:
        as_metric(TrajectoryJudge(), lm=first_lm, cache=disk)(example(), run_react())
    assert first_lm.calls == 1
    again_lm = judging(strict_verdict)  # same model name: same fingerprint
    with VerdictCache(tmp_path / "c") as disk:
        metric = as_metric(TrajectoryJudge(), lm=again_lm, cache=disk)
        assert metric(example(), run_react()) == 0.0
        assert again_lm.calls == 0 and disk.hits == 1
        # another rubric is another fingerprint: a miss on disk as in memory
        as_metric(TrajectoryJudge("1. Only: one criterion here."), lm=again_lm, cache=disk)(example(), run_react())
        assert again_lm.calls == 1 and len(disk) == 2


def test_as_metric_refuses_a_cache_it_cannot_use():
    with pytest.raises(TypeError, match="VerdictCache"):
        as_metric(TrajectoryJudge(), cache="some/dir")
