"""judge_stream: one line per id, resume, repair of a truncated line, the verdict cache, run_judge_file."""

from __future__ import annotations

import json
from collections import Counter

import dspy
import pytest

from rubricforge_dspy.apply.job import BatchOutputError, read_done
from rubricforge_dspy.apply.stream import BatchSummary, DuplicateIdError, judge_stream, run_judge_file
from rubricforge_dspy.core.rubric import SEED_RUBRIC, rubric_sha256
from rubricforge_dspy.core.trajectory import Source
from rubricforge_dspy.judge.cache import VerdictCache
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from tests.support.batch import assert_one_line_per_id, by_text, fake_lm, read_lines, verdict_of, write_generic_jsonl
from tests.support.helpers import make_dataset, make_trajectory

LINE_FIELDS = {"id", "task_id", "domain", "agent", "n_steps", "passed", "score", "reason", "abstained", "error",
               "error_kind", "contradiction", "cached", "attempts", "label", "reward", "program_sha256",
               "judge_fingerprint", "model", "score_calibrated", "evidence", "tokens"}


def scripted_lm() -> ScriptedLM:
    return ScriptedLM(lambda messages: verdict_of(last_user_text(messages)), model="scripted-judge")


# -- with the fake OpenAI server -------------------------------------------------------------------

def test_one_line_per_id_schema_and_no_leak(tmp_path):
    data = make_dataset(12)
    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(by_text) as fake:
        summary = judge_stream(TrajectoryJudge(), iter(data), out, lm=fake_lm(fake), concurrency=4, progress=False)
        requests, usage = list(fake.requests), dict(fake.usage)

    lines = assert_one_line_per_id(out, [t.id for t in data])
    truth = {t.id: t for t in data}
    for line in lines:
        assert set(line) == LINE_FIELDS
        t = truth[line["id"]]
        assert line["passed"] is bool(t.label) and line["abstained"] is False and line["error_kind"] is None
        assert (line["label"], line["reward"], line["n_steps"]) == (t.label, t.reward, len(t.steps))
        assert line["program_sha256"] == rubric_sha256(SEED_RUBRIC)
        assert line["model"] == "openai/fake-judge" and line["cached"] is False and line["attempts"] == 1
    assert (summary.judged, summary.passed, summary.n_abstained, summary.resumed) == (12, 6, 0, 0)
    assert summary.tokens == usage and usage["prompt_tokens"] > 0
    assert "judged 12" in summary.format()
    # What the judge was sent: the structured-output schema, the token cap, and nothing hidden.
    assert len(requests) == 12
    for request in requests:
        body = request["body"]
        assert body["response_format"]["type"] == "json_schema"
        assert body["max_tokens"] == 256
        sent = json.dumps(body)
        assert "CANARY" not in sent and "reward" not in user_text(body)


def test_resume_after_partial_run_skips_done_ids(tmp_path):
    data = make_dataset(10)
    out = tmp_path / "v.jsonl"
    with FakeOpenAI(by_text) as fake:
        first = judge_stream(TrajectoryJudge(), data, out, lm=fake_lm(fake), limit=4, progress=False)
        assert first.judged == 4 and len(read_lines(out)) == 4
        second = judge_stream(TrajectoryJudge(), data, out, lm=fake_lm(fake), progress=False)
        assert fake.n_requests == 10  # nothing judged twice
        third = judge_stream(TrajectoryJudge(), data, out, lm=fake_lm(fake), progress=False)
        assert fake.n_requests == 10
    assert (second.resumed, second.judged) == (4, 6)
    assert (third.resumed, third.judged) == (10, 0)
    assert_one_line_per_id(out, [t.id for t in data])


def test_truncated_final_line_is_repaired(tmp_path):
    data = make_dataset(6)
    out = tmp_path / "v.jsonl"
    lm = scripted_lm()
    judge_stream(TrajectoryJudge(), data[:5], out, lm=lm, progress=False)
    raw = out.read_bytes()
    out.write_bytes(raw[: len(raw) - 30])  # a kill in the middle of writing the 5th line
    state = read_done(out, repair=False)
    assert len(state.ids) == 4 and state.repaired_bytes > 0

    summary = judge_stream(TrajectoryJudge(), data, out, lm=lm, progress=False)
    assert summary.repaired_bytes > 0 and (summary.resumed, summary.judged) == (4, 2)
    assert_one_line_per_id(out, [t.id for t in data])


def test_corrupt_middle_line_and_foreign_program_are_refused(tmp_path):
    data = make_dataset(3)
    out = tmp_path / "v.jsonl"
    judge_stream(TrajectoryJudge(), data[:2], out, lm=scripted_lm(), progress=False, data="dataset-1")
    # What the user sees: which part of the judge changed, and what to do.
    with pytest.raises(BatchOutputError,
                       match=r"belongs to another job .*programs\.0\.signature\.instructions.*new --out"):
        judge_stream(TrajectoryJudge(rubric="Pass everything."), data, out, lm=scripted_lm(), progress=False)
    with pytest.raises(BatchOutputError, match=r"another judge configuration \(changed: lm\.model\)"):
        judge_stream(TrajectoryJudge(), data, out, lm=ScriptedLM(lambda m: verdict_of(""), model="other"),
                     progress=False)
    with pytest.raises(BatchOutputError, match="other input data"):
        judge_stream(TrajectoryJudge(), data, out, lm=scripted_lm(), progress=False, data="another-dataset")
    # The same job resumes without a word.
    assert judge_stream(TrajectoryJudge(), data, out, lm=scripted_lm(), progress=False, data="dataset-1").resumed == 2
    out.write_text("not json\n" + out.read_text())
    with pytest.raises(BatchOutputError, match="line 1"):
        judge_stream(TrajectoryJudge(), data, out, lm=scripted_lm(), progress=False)


def test_cache_hit_makes_no_request_and_abstentions_are_not_cached(tmp_path):
    data = make_dataset(8)
    garbage_for = data[3].id.split(":")[1]  # "t3" appears in that trajectory's text as flight HAT003

    def responder(body, n):
        return "garbage" if "HAT003" in user_text(body) else by_text(body, n)

    cache_dir = tmp_path / "cache"
    with FakeOpenAI(responder) as fake:
        first = judge_stream(TrajectoryJudge(), data, tmp_path / "a.jsonl", lm=fake_lm(fake), cache=cache_dir,
                             progress=False)
        assert fake.n_requests == 8 and first.cached == 0 and first.abstained == Counter(parse=1)
        second = judge_stream(TrajectoryJudge(), data, tmp_path / "b.jsonl", lm=fake_lm(fake), cache=cache_dir,
                              progress=False)
        assert fake.n_requests == 9  # only the abstained one was asked again
    assert second.cached == 7 and second.abstained == Counter(parse=1) and second.lm_calls == 1
    a = {line["id"]: line for line in read_lines(tmp_path / "a.jsonl")}
    for line in read_lines(tmp_path / "b.jsonl"):
        if line["cached"]:
            assert (line["passed"], line["score"], line["reason"]) == \
                (a[line["id"]]["passed"], a[line["id"]]["score"], a[line["id"]]["reason"])
            assert line["attempts"] == 0
        else:
            assert f":{garbage_for}:" in line["id"] and line["abstained"] and line["passed"] is False
    with VerdictCache(cache_dir) as cache:
        assert len(cache) == 7


def _variants():
    """One judge/LM change per fingerprint part; each must miss the cache."""
    from dataclasses import replace

    from rubricforge_dspy.evidence.render import RenderConfig

    def judge(**kw):
        return TrajectoryJudge(**kw)

    def with_field_desc():
        j = judge()
        j.judge.signature = j.judge.signature.with_updated_fields("reason", desc="Two sentences of evidence.")
        return j

    def with_demo():
        j = judge()
        j.judge.demos = [dspy.Example(trajectory="x", reason="r", passed=True, score=0.9)]
        return j

    base = dict(temperature=0.0, max_tokens=256, seed=0)
    return {
        "instructions": (judge(rubric="Another rubric."), scripted_lm()),
        "field text": (with_field_desc(), scripted_lm()),
        "demos": (with_demo(), scripted_lm()),
        "adapter": (judge(adapter=dspy.JSONAdapter()), scripted_lm()),
        "model": (judge(), ScriptedLM(lambda m: verdict_of(last_user_text(m)), model="m2")),
        "temperature": (judge(), scripted_lm().copy(**{**base, "temperature": 0.7})),
        "max_tokens": (judge(), scripted_lm().copy(**{**base, "max_tokens": 99})),
        "render": (judge(render_config=replace(RenderConfig(), max_step_chars=123)), scripted_lm()),
    }


def test_every_fingerprint_part_misses_the_cache(tmp_path):
    data = make_dataset(3)
    with VerdictCache(tmp_path / "c") as cache:
        judge_stream(TrajectoryJudge(), data, tmp_path / "base.jsonl", lm=scripted_lm(), cache=cache, progress=False)
        for name, (judge, lm) in _variants().items():
            summary = judge_stream(judge, data, tmp_path / f"{name}.jsonl", lm=lm, cache=cache, progress=False)
            assert summary.cached == 0 and summary.lm_calls == 3, name
        same = judge_stream(TrajectoryJudge(), data, tmp_path / "same.jsonl", lm=scripted_lm(), cache=cache,
                            progress=False)
    assert same.cached == 3 and same.lm_calls == 0


def test_structured_output_dialect_and_string_bound_change_the_fingerprint():
    from dataclasses import replace

    base = LMConfig(model="m@r", api_base="http://127.0.0.1:1/v1")
    fingerprints = {TrajectoryJudge().fingerprint(make_lm(config)).sha256 for config in (
        base, replace(base, structured_output="json_object_schema"), replace(base, max_string_length=300),
        replace(base, api_base="http://127.0.0.1:2/v1"), replace(base, seed=1))}
    assert len(fingerprints) == 5
    # What does not change an answer does not change the key.
    assert TrajectoryJudge().fingerprint(make_lm(replace(base, timeout=3, num_retries=0))).sha256 == \
        TrajectoryJudge().fingerprint(make_lm(base)).sha256


def test_package_version_is_part_of_the_fingerprint(monkeypatch):
    from rubricforge_dspy.judge import fingerprint

    before = TrajectoryJudge().fingerprint(scripted_lm()).sha256
    monkeypatch.setattr(fingerprint, "package_version", lambda package: "9.9.9")
    assert TrajectoryJudge().fingerprint(scripted_lm()).sha256 != before


def test_default_cache_dir_is_next_to_output(tmp_path):
    out = tmp_path / "run" / "v.jsonl"
    judge_stream(TrajectoryJudge(), make_dataset(2), out, lm=scripted_lm(), cache=True, progress=False)
    assert (tmp_path / "run" / ".rubricforge_cache" / "verdicts-v2.sqlite3").is_file()


def test_duplicate_ids_raise_naming_the_record_or_are_counted(tmp_path):
    data = make_dataset(4)
    twin = make_trajectory(99, success=True, task="t1")  # same id as data[1], another source record
    twin = type(twin)(**{**twin.__dict__, "source": Source("dup.jsonl", 7)})
    stream = [*data[:2], twin, *data[2:]]
    out = tmp_path / "v.jsonl"
    with pytest.raises(DuplicateIdError, match=r"dup\.jsonl, record 7: duplicate trajectory id"):
        judge_stream(TrajectoryJudge(), stream, out, lm=scripted_lm(), progress=False)
    assert {line["id"] for line in read_lines(out)} == {t.id for t in data[:2]}  # earlier verdicts kept

    summary = judge_stream(TrajectoryJudge(), stream, out, lm=scripted_lm(), on_duplicate="skip", progress=False)
    assert (summary.duplicates, summary.resumed, summary.judged) == (1, 2, 2)
    assert_one_line_per_id(out, [t.id for t in data])


def test_stream_is_lazy_and_bounded(tmp_path):
    out = tmp_path / "v.jsonl"
    concurrency = 2
    ahead = []

    def endless():
        i = 0
        while True:  # never ends: only a lazy consumer with a limit can finish
            written = sum(1 for _ in open(out)) if out.exists() else 0
            ahead.append(i - written)
            yield make_trajectory(i, success=i % 3 != 0)
            i += 1

    summary = judge_stream(TrajectoryJudge(), endless(), out, lm=scripted_lm(), concurrency=concurrency,
                           limit=25, progress=False)
    assert summary.judged == 25 and len(read_lines(out)) == 25
    assert max(ahead) <= 2 * concurrency  # never more than the in-flight window held at once


def test_judge_lm_is_not_mutated_and_dspy_settings_lm_is_used(tmp_path):
    judge = TrajectoryJudge()
    lm = scripted_lm()
    with dspy.context(lm=lm):
        summary = judge_stream(judge, make_dataset(3), tmp_path / "v.jsonl", progress=False, timeout=3.0)
    assert summary.judged == 3 and summary.model == "scripted-judge"
    assert judge.judge.lm is None and "timeout" not in lm.kwargs
    with dspy.context(lm=None), pytest.raises(ValueError, match="no LM"):  # whatever LM another test left set
        judge_stream(TrajectoryJudge(), make_dataset(1), tmp_path / "w.jsonl", progress=False)


def test_progress_bar_and_summary_format(tmp_path, capsys, monkeypatch):
    # stderr is no terminal here: progress is a line every RUBRICFORGE_PROGRESS_SECONDS (0: every verdict)
    monkeypatch.setenv("RUBRICFORGE_PROGRESS_SECONDS", "0")
    summary = judge_stream(TrajectoryJudge(), make_dataset(3), tmp_path / "v.jsonl", lm=scripted_lm(),
                           progress=True)
    assert "judging: 3/3 verdicts" in capsys.readouterr().err
    text = summary.format()
    assert "judged 3" in text and "verdicts/s" in text and summary.throughput > 0
    assert isinstance(summary, BatchSummary) and summary.to_dict()["judged"] == 3


# -- run_judge_file: the Python API behind `rubricforge judge` ---------------------------------------


def test_run_judge_file_seed_judge_and_frozen_program(tmp_path):
    from rubricforge_dspy.program.store import freeze

    data = tmp_path / "data.jsonl"
    ids = write_generic_jsonl(data, 6, bad_line=True)
    with pytest.raises(Exception, match="data.jsonl"):
        run_judge_file(None, data, tmp_path / "strict.jsonl", lm=scripted_lm(), progress=False)

    summary = run_judge_file(None, data, tmp_path / "v.jsonl", lm=scripted_lm(), on_error="skip", progress=False)
    assert (summary.judged, summary.skipped) == (6, 1)
    assert_one_line_per_id(tmp_path / "v.jsonl", ids)
    assert (tmp_path / ".rubricforge_cache").is_dir()

    program = tmp_path / "program.json"
    freeze(TrajectoryJudge(rubric="Pass only clean refunds."), program)
    with FakeOpenAI(by_text) as fake:
        config = LMConfig(model=fake.model, api_base=fake.url + "/v1", cache=False, num_retries=0, timeout=5.0)
        frozen = run_judge_file(program, data, tmp_path / "p.jsonl", lm=config, on_error="skip", limit=4,
                                cache=False, progress=False)
        assert fake.n_requests == 4
        assert all("Pass only clean refunds." in json.dumps(r["body"]) for r in fake.requests)
    lines = read_lines(tmp_path / "p.jsonl")
    assert frozen.judged == 4 and {line["program_sha256"] for line in lines} == {
        rubric_sha256("Pass only clean refunds.")}


def test_verdict_cache_turns_dspy_cache_off(tmp_path):
    """With a verdict cache, every miss is a real request even when the LM has DSPy's cache on."""
    import uuid

    data = make_dataset(3)
    with FakeOpenAI(by_text, model=f"fake-{uuid.uuid4().hex[:8]}") as fake:
        lm = make_lm(LMConfig(model=fake.model, api_base=fake.url + "/v1", cache=True, num_retries=0, timeout=5.0))
        for name in ("a", "b"):
            judge_stream(TrajectoryJudge(), data, tmp_path / f"{name}.jsonl", lm=lm, cache=tmp_path / f"cache-{name}",
                         progress=False)
        assert fake.n_requests == 6
    assert lm.cache is True  # the caller's LM is untouched


def test_interrupt_keeps_finished_lines_and_rerun_completes(tmp_path):
    data = make_dataset(8)
    out = tmp_path / "v.jsonl"

    def interrupted():
        yield from data[:5]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        judge_stream(TrajectoryJudge(), interrupted(), out, lm=scripted_lm(), concurrency=2, progress=False)
    kept = {line["id"] for line in read_lines(out)}
    assert kept <= {t.id for t in data[:5]}
    summary = judge_stream(TrajectoryJudge(), data, out, lm=scripted_lm(), progress=False)
    assert summary.resumed == len(kept) and summary.judged == 8 - len(kept)
    assert_one_line_per_id(out, [t.id for t in data])


def test_fake_server_models_endpoint_and_records():
    import urllib.request

    with FakeOpenAI(model="m-1") as fake:
        with urllib.request.urlopen(fake.url + "/v1/models", timeout=5) as reply:
            assert json.load(reply)["data"][0]["id"] == "m-1"
        body = json.dumps({"model": "m-1", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(fake.url + "/v1/chat/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as reply:
            answer = json.load(reply)
    assert json.loads(answer["choices"][0]["message"]["content"])["passed"] is True
    assert fake.requests[0]["body"]["max_tokens"] == 9 and fake.usage["prompt_tokens"] >= 1
