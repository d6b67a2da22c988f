"""`rubricforge judge --read {budget,segments,explore}` against the fake OpenAI-compatible server on 127.0.0.1:
what each mode sends, and what its verdict line says it read."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.testing.fake_server import FakeOpenAI, system_text
from tests.judge._long_episodes import marker, write_long_jsonl

SERVER = ["--model", "fake-judge-r1", "--no-cache", "--render-tokens", "1500"]


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def segments_answer(body, n):
    if "overview" in system_text(body):
        return json.dumps({"passed": False, "score": 0.2, "reason": "step [41] failed"})
    return json.dumps({"findings": "none"})


def test_segments_sends_every_step_of_a_100_step_episode_and_the_line_says_complete(tmp_path):
    data, out = write_long_jsonl(tmp_path / "long.jsonl"), tmp_path / "v.jsonl"
    with FakeOpenAI(segments_answer) as fake:
        assert main(["judge", "--data", str(data), "--out", str(out), "--read", "segments",
                     "--api-base", fake.url + "/v1", *SERVER]) == 0
        bodies = [json.dumps(b) for b in fake.chat_bodies]
    assert all(any(marker(n) in body for body in bodies) for n in range(1, 101))
    [line] = lines(out)
    assert line["n_steps"] == 100 and line["passed"] is False and line["reason"] == "step [41] failed"
    assert line["evidence"]["complete"] is True and line["evidence"]["read"] == "segments"
    assert line["evidence"]["steps_read"] == list(range(1, 101)) and line["evidence"]["elided"] == 0
    assert len(bodies) > 2  # windows and the verdict call, not one render


def test_budget_stays_the_default_and_elides_the_middle(tmp_path):
    data, out = write_long_jsonl(tmp_path / "long.jsonl"), tmp_path / "v.jsonl"
    verdict = json.dumps({"reason": "ok", "passed": True, "score": 0.9})
    with FakeOpenAI(lambda body, n: verdict) as fake:
        assert main(["judge", "--data", str(data), "--out", str(out), "--api-base", fake.url + "/v1", *SERVER]) == 0
        bodies = [json.dumps(b) for b in fake.chat_bodies]
    assert len(bodies) == 1 and not all(marker(n) in bodies[0] for n in range(1, 101))
    assert lines(out)[0]["passed"] is True


def test_explore_records_the_steps_its_tools_returned(tmp_path):
    data, out = write_long_jsonl(tmp_path / "long.jsonl"), tmp_path / "v.jsonl"

    def act(action, argument="", passed=False, score=0.0, reason=""):
        return {"action": action, "argument": argument, "passed": passed, "score": score, "reason": reason}

    actions = [act("outline"), act("read_step", "41"), act("read_step", "57"),
               act("verdict", passed=False, score=0.2, reason="[41] failed")]
    with FakeOpenAI(lambda body, n: json.dumps(actions[min(n, len(actions) - 1)])) as fake:
        assert main(["judge", "--data", str(data), "--out", str(out), "--read", "explore",
                     "--api-base", fake.url + "/v1", *SERVER]) == 0
        bodies = [json.dumps(b) for b in fake.chat_bodies]
    [line] = lines(out)
    assert line["evidence"]["steps_read"] == [41, 57] and line["evidence"]["read"] == "explore"
    assert line["evidence"]["complete"] is False and line["evidence"]["steps"] == 100
    # the steps it says it read are the ones whose text reached the LM (in the transcript of a later call)
    assert marker(41) in bodies[2] and marker(57) in bodies[3] and marker(73) not in "".join(bodies)


def test_read_refuses_a_calibrated_program_before_any_call(tmp_path, capsys):
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge.operating_point import Calibration
    from rubricforge_dspy.program.store import freeze

    program = tmp_path / "calibrated.json"
    freeze(TrajectoryJudge(), program, lm="scripted",
           extra={"calibration": Calibration("platt", {"a": 1.0, "b": -0.5}, n=20).to_dict(),
                  "threshold": {"pass_threshold": 0.7}})
    data, out = write_long_jsonl(tmp_path / "long.jsonl"), tmp_path / "v.jsonl"
    with FakeOpenAI(segments_answer) as fake:
        code = main(["judge", "--data", str(data), "--out", str(out), "--read", "segments", "--program",
                     str(program), "--api-base", fake.url + "/v1", *SERVER])
        assert fake.chat_bodies == []
    assert code == 2 and "is calibrated" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("mode", ["segments", "explore"])
def test_read_with_a_cascade_is_refused(tmp_path, capsys, mode):
    from rubricforge_dspy.judge.cascade import Cascade, StageRule
    from rubricforge_dspy.judge.module import TrajectoryJudge

    cascade = tmp_path / "cascade.json"
    Cascade([TrajectoryJudge()], [StageRule("judge", 0.9, 0.1)]).save(cascade)
    data = write_long_jsonl(tmp_path / "long.jsonl")
    code = main(["judge", "--data", str(data), "--out", str(tmp_path / "v.jsonl"), "--cascade", str(cascade),
                 "--read", mode, "--api-base", "http://127.0.0.1:9/v1", *SERVER])
    assert code == 2 and "goes with --program, not a cascade" in capsys.readouterr().err


@pytest.fixture
def reading_lms(monkeypatch):
    """`rubricforge induce`'s LMs: the long-episode judge's scripted LM and the scripted reflection LM."""
    from contextlib import contextmanager

    import rubricforge_dspy.cli.main as cli
    from rubricforge_dspy.testing.scripted import ScriptedLM
    from tests.support.induction import make_reflection_lm, reading_answers

    @contextmanager
    def fake_lms(args, reflection=False, reflection_max_tokens=None):
        lms = (ScriptedLM(reading_answers, model="scripted-judge"), make_reflection_lm([]))
        yield lms if reflection else lms[0]

    monkeypatch.setattr(cli, "lm_from_args", fake_lms)


@pytest.mark.parametrize(("mode", "kind"), [("segments", "SegmentsJudge"), ("explore", "ExplorerJudge")])
def test_induce_read_evolves_the_reading_judge_and_freezes_one_load_judge_reads(tmp_path, capsys, reading_lms, mode,
                                                                                kind):
    from rubricforge_dspy.core.rubric import SEED_RUBRIC
    from rubricforge_dspy.data.export import convert_trajectories
    from rubricforge_dspy.judge.loading import load_judge
    from tests.support.helpers import make_dataset
    from tests.support.induction import ERROR_CRITERION

    data, out = tmp_path / "data.jsonl", tmp_path / "programs" / "reader.json"
    convert_trajectories(make_dataset(30), data)
    code = main(["induce", "--data", str(data), "--out", str(out), "--budget", "80", "--minibatch", "3",
                 "--preset", "embedded", "--read", mode])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert "<- best" in captured.out and f"frozen: {out} (a {mode} judge)" in captured.out
    assert f"not certified: induce does not certify a {mode} judge yet" in captured.err
    assert f"rubricforge certify {out} --data HELD_OUT" in captured.err
    judge = load_judge(out)
    assert type(judge).__name__ == kind and judge.read_mode == mode
    assert judge.rubric != SEED_RUBRIC and all(ERROR_CRITERION in p.signature.instructions for p in judge.predictors())
    assert judge.manifest["induction"]["budget"] == 80


def test_induce_read_refuses_the_operating_point_flags_before_any_call(tmp_path, capsys, reading_lms):
    from rubricforge_dspy.data.export import convert_trajectories
    from tests.support.helpers import make_dataset

    data = tmp_path / "data.jsonl"
    convert_trajectories(make_dataset(30), data)
    for flag in (["--hybrid"], ["--max-false-pass", "0.1"]):
        code = main(["induce", "--data", str(data), "--out", str(tmp_path / "p.json"), "--read", "segments", *flag])
        assert code == 2 and f"does not take {flag[0]}" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_read_with_the_batch_api_is_refused(tmp_path, capsys):
    data = write_long_jsonl(tmp_path / "long.jsonl")
    code = main(["judge", "--data", str(data), "--out", str(tmp_path / "v.jsonl"), "--read", "segments",
                 "--batch-api", "--api-base", "http://127.0.0.1:9/v1", *SERVER])
    assert code == 2 and "not with --batch-api or --ray" in capsys.readouterr().err
