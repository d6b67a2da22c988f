"""One run path (issue #36): a cascade runs through the job runner of every run. Against a counting
OpenAI-compatible server on 127.0.0.1: a re-run of a cascade into a new output is answered by the verdict cache (no
LM request); `judge --cascade --batch-api` and `judge --cascade --ray` write the verdicts of the plain cascade run;
the command line streams its input (the first verdict line is written before the input is read through)."""

from __future__ import annotations

import hashlib

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.judge.cascade import StageRule
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.cascade import REWARD_ABOVE_0, lines_of, save_cascade

SURE = {"reason": "The agent bought the item.", "passed": True, "score": 0.9}
UNSURE = {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}
COMPARED = ("id", "stage", "stage_index", "passed", "score", "abstained", "error_kind", "reason", "score_calibrated",
            "escalated_by", "lm_stages_run")


def _by_text(body, n):
    """An answer that depends on the trajectory only (not on arrival order or the back end)."""
    return SURE if int(hashlib.sha256(user_text(body).encode()).hexdigest(), 16) % 2 else UNSURE


def _argv(cascade, halves, out, fake, *extra):
    return ["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--limit",
            "60", "--out", str(out), "--concurrency", "2", "--api-base", fake.url + "/v1", "--model", "fake-judge",
            *extra]


def _compared(path):
    return sorted(tuple(line.get(k) for k in COMPARED) for line in lines_of(path))


def test_a_rerun_of_a_cascade_into_a_new_output_is_answered_by_the_cache(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    first, second = tmp_path / "a" / "v.jsonl", tmp_path / "a" / "again.jsonl"  # one cache beside both
    with FakeOpenAI(_by_text) as fake:
        assert main(_argv(cascade, halves, first, fake)) == 0
        asked = fake.n_requests
        assert main(_argv(cascade, halves, second, fake)) == 0
        assert asked > 0 and fake.n_requests == asked  # the second run asked the LM nothing
    assert _compared(second) == [(*row[:-1], 0) for row in _compared(first)]  # no LM stage called the second time
    again = lines_of(second)
    assert all(x["cached"] for x in again if x["stage"] != "floor") and not any(x["lm_tokens"] for x in again)
    assert "answered by the verdict cache" in capsys.readouterr().err
    with FakeOpenAI(_by_text) as fake:  # --no-cache asks again
        assert main(_argv(cascade, halves, tmp_path / "b" / "v.jsonl", fake, "--no-cache")) == 0
        assert fake.n_requests == asked


def test_judge_cascade_batch_api_writes_the_verdicts_of_the_plain_run(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    plain, batch = tmp_path / "plain" / "v.jsonl", tmp_path / "batch" / "v.jsonl"
    with FakeOpenAI(_by_text) as fake:
        assert main(_argv(cascade, halves, plain, fake, "--no-cache")) == 0
        capsys.readouterr()
        assert main(_argv(cascade, halves, batch, fake, "--no-cache", "--batch-api", "--poll-interval", "0.05")) == 0
    err = capsys.readouterr().err
    judged = sum(x["stage"] != "floor" for x in lines_of(plain))
    assert f"completed ({judged}/{judged} done, 0 failed)" in err  # the LLM stage's calls were one batch
    assert _compared(batch) == _compared(plain)
    assert [r["id"] for r in lines_of(batch.with_name("v.jsonl.escalated.jsonl"))] == \
        [x["id"] for x in lines_of(batch) if x["stage"] == "escalated"]


@pytest.mark.slow
def test_judge_cascade_ray_writes_the_verdicts_of_the_plain_run(halves, tmp_path, monkeypatch):
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'rubricforge-dspy[ray]'")
    import ray

    monkeypatch.setenv("RAY_ADDRESS", "")
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    plain, on_ray = tmp_path / "plain" / "v.jsonl", tmp_path / "ray" / "v.jsonl"
    try:
        with FakeOpenAI(_by_text) as fake:
            assert main(_argv(cascade, halves, plain, fake, "--no-cache")) == 0
            online = fake.n_requests
            assert main(_argv(cascade, halves, on_ray, fake, "--no-cache", "--ray", "--ray-workers", "1")) == 0
            assert fake.n_requests == 2 * online  # the same requests, from the Ray workers
            assert main(_argv(cascade, halves, on_ray, fake, "--ray", "--ray-workers", "1")) == 0  # resumed
            assert fake.n_requests == 2 * online
    finally:
        ray.shutdown()
    assert _compared(on_ray) == _compared(plain)


def test_the_command_line_streams_a_cascades_input(halves, tmp_path, monkeypatch):
    """The first verdict line is written while the input is read chunk by chunk: never loaded whole."""
    import rubricforge_dspy.apply.runner as runner
    import rubricforge_dspy.data.formats as formats
    from rubricforge_dspy.apply.writer import VerdictWriter

    monkeypatch.setattr(runner, "CASCADE_CHUNK", 10)
    pulled: list[list[int]] = []
    read = formats.iter_trajectories

    def counted(*args, **kwargs):
        count = [0]
        pulled.append(count)
        for trajectory in read(*args, **kwargs):
            count[0] += 1
            yield trajectory

    at_first_line: list[int] = []
    write = VerdictWriter.write

    def noted(self, record):
        if not at_first_line:
            at_first_line.append(pulled[-1][0])
        write(self, record)

    monkeypatch.setattr(formats, "iter_trajectories", counted)
    monkeypatch.setattr(VerdictWriter, "write", noted)
    cascade = save_cascade(halves, tmp_path, None)
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "60", "--out", str(out)]) == 0
    assert len(lines_of(out)) == 60 and at_first_line and at_first_line[0] <= 11  # one chunk (and the next read)
