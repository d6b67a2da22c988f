"""`judge --cascade` is crash-safe, resumable and counts its tokens, against a recording OpenAI-compatible server on
127.0.0.1: the tokens in the lines, the run summary, the job file, `certify` and `report` equal what the server
served; an LLM stage whose server dies mid-run leaves the floor's lines (exit 3), and so does a SIGKILL; the same
command again asks the LM only for the items not in the file; another cascade on the same output is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.cascade import StageRule
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.cascade import REWARD_ABOVE_0, lines_of, save_cascade
from tests.support.helpers import REPO

SURE = {"reason": "The agent bought the item.", "passed": True, "score": 0.9}
UNSURE = {"reason": "Cannot tell from the pages.", "passed": True, "score": 0.5}


def _answers(body, n):
    return SURE if n % 2 == 0 else UNSURE


def _judge(cascade, halves, out, fake, *extra) -> int:
    return main(["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "60", "--out", str(out), "--concurrency", "1", "--api-base", fake.url + "/v1",
                 "--model", "fake-judge", *extra])


def _instructions(halves) -> dict[str, str]:
    """Each item's instruction (its first step), kept only where it is unique in the set: a request holding it
    was made for that item."""
    data = list(load_trajectories(halves / "cal.jsonl", label_threshold=0.0))
    text = {t.id: t.steps[0].content.strip() for t in data}
    counts: dict[str, int] = {}
    for value in text.values():
        counts[value] = counts.get(value, 0) + 1
    return {ident: value for ident, value in text.items() if counts[value] == 1}


def _summed(lines) -> dict:
    total = {"prompt_tokens": 0, "completion_tokens": 0}
    for line in lines:
        for used in line["lm_tokens"].values():
            for key in total:
                total[key] += used[key]
    return total


def test_tokens_are_counted_per_line_and_reported_everywhere(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(_answers) as fake:
        assert _judge(cascade, halves, out, fake) == 0
        served = dict(fake.usage)
    lines = lines_of(out)
    judged = [x for x in lines if x["lm_stages_run"]]
    assert served["prompt_tokens"] > 0 and judged and _summed(lines) == served
    assert all(x["lm_tokens"] == {} for x in lines if x["stage"] == "floor")
    err = capsys.readouterr().err
    assert f"tokens of this run's LM calls: prompt {served['prompt_tokens']:,}, completion " \
           f"{served['completion_tokens']:,}" in err
    total = served["prompt_tokens"] + served["completion_tokens"]
    estimate = round(total / len(judged) * 60)
    assert f"LM tokens: {total:,}" in err and f"about {estimate:,} (estimate: 60 items x" in err
    job = json.loads(Path(f"{out}.job.json").read_text())
    assert job["cascade_runs"][-1]["tokens"] == served and job["cascade_runs"][-1]["outcome"] == "complete"

    report = tmp_path / "r" / "report.md"
    assert main(["report", "--predictions", str(out), "--out", str(report)]) == 0
    section = json.loads(report.with_suffix(".json").read_text())["cascade"]
    spend = section["token_spend"]
    assert spend["tokens"] == {**served, "total_tokens": total} and spend["lm_items"] == len(judged)
    assert spend["estimate_judging_everything"]["total_tokens"] == estimate
    assert f"LM tokens: {total:,}" in report.read_text() and "(estimate: 60 items x" in report.read_text()

    held_out, small = tmp_path / "held_out.jsonl", tmp_path / "small.jsonl"
    small.write_text("\n".join((halves / "cal.jsonl").read_text().splitlines()[:30]) + "\n")
    with FakeOpenAI(_answers) as fake:
        assert main(["certify", str(cascade), "--data", str(small), *REWARD_ABOVE_0,
                     "--verdicts-out", str(held_out), "--api-base", fake.url + "/v1", "--model", "fake-judge"]) == 0
        served = dict(fake.usage)
    printed = capsys.readouterr().out
    assert _summed(lines_of(held_out)) == served
    assert f"LM tokens: {served['prompt_tokens'] + served['completion_tokens']:,}" in printed


def test_a_dead_stage_lm_keeps_the_floor_and_a_rerun_asks_only_for_the_rest(halves, tmp_path, capsys):
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(_answers, die_after=6) as fake:  # answers 6 requests, then the server is gone
        assert _judge(cascade, halves, out, fake, "--max-consecutive-errors", "2", "--timeout", "5") == 3
        port = fake.port  # the server comes back on the same endpoint (the endpoint is part of the job)
    err = capsys.readouterr().err
    assert "error: JudgeUnavailableError" in err and "verdict line(s) of this run are kept in" in err
    first = lines_of(out)
    floor = {x["id"] for x in first if x["stage"] == "floor"}
    answered = {x["id"] for x in first if x["stage"] != "floor" and x["error_kind"] not in LM_ERROR_KINDS}
    assert floor and len(answered) == 6  # the 6 answered calls: decided by the judge or escalated
    kept = {x["id"] for x in first if not x["abstained"] or x["error_kind"] == "escalated"}
    assert kept == floor | answered

    unique = _instructions(halves)
    with FakeOpenAI(_answers, port=port) as fake:
        assert _judge(cascade, halves, out, fake) == 0
        asked = [user_text(body) for body in fake.chat_bodies]
    final = lines_of(out)
    assert len(final) == 60 and len({x["id"] for x in final}) == 60
    # the floor's lines of the first run were all kept (the run streams: the floor had not yet seen every item
    # when the server died, and settles the rest in the re-run)
    assert {x["id"]: x for x in final if x["id"] in floor} == {x["id"]: x for x in first if x["id"] in floor}
    assert floor <= {x["id"] for x in final if x["stage"] == "floor"}
    assert not any(unique[i] in body for i in kept if i in unique for body in asked)  # done: never asked again
    redone = [x for x in final if x["id"] not in kept and x["stage"] != "floor"]  # (the floor asks no LM)
    # one request per stage run, and a retry of a transient failure (a connection reset on a loaded machine)
    # is a second request for the same item: never fewer requests, and none for a done item (above)
    assert sum(x["lm_stages_run"] for x in redone) == len(redone) and len(asked) >= len(redone)
    assert all(any(unique[x["id"]] in body for body in asked) for x in redone if x["id"] in unique)
    escalated = [x["id"] for x in final if x["stage"] == "escalated"]
    assert [r["id"] for r in lines_of(Path(f"{out}.escalated.jsonl"))] == escalated
    assert "(%d already in the file, not judged again)" % len(kept) in capsys.readouterr().err
    runs = json.loads(Path(f"{out}.job.json").read_text())["cascade_runs"]
    assert [r["outcome"] for r in runs] == ["LM failure", "complete"]

    # Rerun: only the items whose line is an LM failure are asked again (on a loaded machine a call of the
    # second run can fail too: then exactly those are asked, from the first stage); nothing else is.
    failed = {x["id"] for x in final if x["abstained"] and x["error_kind"] in LM_ERROR_KINDS}
    with FakeOpenAI(_answers, port=port) as fake:
        assert _judge(cascade, halves, out, fake) == 0
        asked = [user_text(body) for body in fake.chat_bodies]
    done = {x["id"] for x in final} - failed
    assert not any(unique[i] in body for i in done if i in unique for body in asked)
    if not failed:
        assert asked == [] and "nothing to do: all 60 item(s) were judged already" in capsys.readouterr().err


def test_another_cascade_on_the_same_output_is_refused(halves, tmp_path, capsys):
    first = save_cascade(halves, tmp_path / "a", None)
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--cascade", str(first), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0,
                 "--limit", "20", "--out", str(out)]) == 0
    before = out.read_bytes()
    other = save_cascade(halves, tmp_path / "b", StageRule("judge", 0.8, 0.2))
    with FakeOpenAI(_answers) as fake:
        assert _judge(other, halves, out, fake) == 2
        assert fake.n_requests == 0
    assert "belongs to another job (another judge configuration" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_killed_run_keeps_the_floors_lines_and_the_same_command_resumes(halves, tmp_path):
    """SIGKILL while the LLM stage's first request is held by the server: the floor's lines so far are on disk (the
    floor settles items as the LLM stage asks for them); the same command again asks only for what the floor left."""
    cascade = save_cascade(halves, tmp_path, StageRule("judge", 0.8, 0.2))
    out = tmp_path / "v.jsonl"
    reached, release = threading.Event(), threading.Event()

    def held_then_answer(body, n):
        if n == 0:
            reached.set()
            release.wait(120)  # held until the run that sent it is killed
        return _answers(body, n)

    with FakeOpenAI(held_then_answer) as fake:
        argv = ["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--limit",
                "60", "--out", str(out), "--concurrency", "1", "--api-base", fake.url + "/v1", "--model", "fake-judge"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        process = subprocess.Popen([sys.executable, "-m", "rubricforge_dspy", *argv], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert reached.wait(300), "the run never reached its LLM stage"
            process.send_signal(signal.SIGKILL)
            assert process.wait(60) == -signal.SIGKILL
        finally:
            release.set()
            if process.poll() is None:
                process.kill()
        killed = lines_of(out)
        assert killed and {x["stage"] for x in killed} == {"floor"}
        before = fake.n_requests
        assert main(argv) == 0
        asked = [user_text(r["body"]) for r in fake.requests[before:]]
    final = lines_of(out)
    # the killed run's floor lines are kept; the run streams, so the floor settles the items it had not reached then
    settled = {x["id"] for x in final if x["stage"] == "floor"}
    assert len(final) == 60 and {x["id"] for x in killed} <= settled
    assert {x["id"]: x for x in final if x["id"] in settled}.items() >= {x["id"]: x for x in killed}.items()
    assert len(asked) == 60 - len(settled) == sum(x["lm_stages_run"] for x in final)
    unique = _instructions(halves)
    assert not any(unique[x["id"]] in body for x in killed if x["id"] in unique for body in asked)
