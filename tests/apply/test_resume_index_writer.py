"""The verdict writer keeps the done index (OUT.ids) current: after a run, resume reads the index only,
and every guarantee of resume survives (LM-error abstentions asked again, kills between a line and its
entry, a cut entry, a file changed behind the index)."""

from __future__ import annotations

import json
import os

import pytest

from rubricforge_dspy.apply.job import ids_path, read_done
from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, Reply, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from tests.support.batch import assert_one_line_per_id, fake_lm, verdict_of
from tests.support.helpers import make_dataset


def _scripted() -> ScriptedLM:
    return ScriptedLM(lambda messages: verdict_of(last_user_text(messages)), model="scripted-judge")


def test_after_a_run_resume_reads_the_index_only(tmp_path):
    data = make_dataset(12)
    out = tmp_path / "v.jsonl"
    judge_stream(TrajectoryJudge(), data, out, lm=_scripted(), progress=False, concurrency=4)
    state = read_done(out)
    assert state.ids == {t.id for t in data}
    assert (state.from_index, state.lines_read) == (12, 0)  # no verdict line re-read
    assert len(state.fingerprints) == 1 and None not in state.fingerprints
    again = judge_stream(TrajectoryJudge(), data, out, lm=_scripted(), progress=False)
    assert (again.resumed, again.judged) == (12, 0)
    assert_one_line_per_id(out, [t.id for t in data])


def test_resumed_run_appends_its_ids_to_the_index(tmp_path):
    data = make_dataset(10)
    out = tmp_path / "v.jsonl"
    judge_stream(TrajectoryJudge(), data, out, lm=_scripted(), progress=False, limit=4)
    second = judge_stream(TrajectoryJudge(), data, out, lm=_scripted(), progress=False)
    assert (second.resumed, second.judged) == (4, 6)
    state = read_done(out)
    assert state.ids == {t.id for t in data} and (state.from_index, state.lines_read) == (10, 0)


def test_lm_error_abstention_is_not_indexed_and_is_asked_again(tmp_path):
    """Over a real HTTP server: an id whose request fails (HTTP 500) is an abstention the next resume
    must ask again; the index stops at it, so it and every later line are read back from the file."""
    data = make_dataset(8)
    out = tmp_path / "v.jsonl"
    seen = []

    def responder(body, n):
        seen.append(n)
        return Reply(status=500) if len(seen) == 4 else verdict_of(user_text(body))

    with FakeOpenAI(responder) as fake:
        first = judge_stream(TrajectoryJudge(), data, out, lm=fake_lm(fake), progress=False, concurrency=1,
                             max_retries=0)
    assert first.n_abstained == 1
    bad = next(line["id"] for line in map(json.loads, out.read_text().splitlines()) if line["abstained"])
    state = read_done(out)
    assert state.retried == 1 and bad not in state.ids and len(state.ids) == 7
    assert state.lines_read > 0  # the abstention's line and the later ones were read back
    assert read_done(out).lines_read == 0


def test_kill_between_a_line_and_its_entry_or_mid_entry_is_recovered(tmp_path):
    data = make_dataset(6)
    out = tmp_path / "v.jsonl"
    judge_stream(TrajectoryJudge(), data, out, lm=_scripted(), progress=False)
    index = ids_path(out)
    raw = index.read_bytes()
    last_entry = raw.rstrip(b"\n").rsplit(b"\n", 1)[1]
    assert json.loads(last_entry)[0] == json.loads(out.read_text().splitlines()[-1])["id"]
    index.write_bytes(raw[: len(raw) - len(last_entry) - 1] + last_entry[:7])  # the last entry cut mid-write
    state = read_done(out)
    assert state.ids == {t.id for t in data} and state.lines_read == 1  # that one line read back


def test_index_of_a_rewritten_file_is_not_trusted(tmp_path):
    data = make_dataset(6)
    out = tmp_path / "v.jsonl"
    judge_stream(TrajectoryJudge(), data, out, lm=_scripted(), progress=False)
    lines = out.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])["id"]
    inode = os.stat(out).st_ino
    with out.open("r+b") as handle:  # the same inode and size, another id in the last line
        handle.seek(sum(map(len, lines[:-1])))
        handle.write(lines[-1].replace(last.encode(), b"x" * len(last)))
    assert os.stat(out).st_ino == inode
    state = read_done(out)
    assert state.from_index == 0 and state.lines_read == 6  # the full pass
    assert state.ids == {t.id for t in data} - {last} | {"x" * len(last)}


def test_first_resume_pass_streams_keeps_lines_verbatim_and_names_a_repeated_id(tmp_path):
    """The full pass (no index yet) keeps ids only: the lines it keeps are left byte for byte, an LM-error
    abstention and a torn tail are dropped, and a repeated id names both of its lines."""
    from rubricforge_dspy.apply.job import BatchOutputError
    from rubricforge_dspy.core.verdict import Verdict, verdict_line

    data = make_dataset(5)
    lines = [json.dumps(verdict_line(t, Verdict.from_answer(i % 2 == 0, 0.25 * (i % 4), "r")), indent=None) + "\n"
             for i, t in enumerate(data)]  # the standard library's spacing: not what orjson would write
    lines[2] = json.dumps(verdict_line(data[2], Verdict.abstention("timed out", "timeout"))) + "\n"
    out = tmp_path / "v.jsonl"
    out.write_text("".join(lines) + "\n" + '{"id": "cut')
    state = read_done(out)
    assert state.ids == {t.id for i, t in enumerate(data) if i != 2}
    assert (state.retried, state.lines_read, state.repaired_bytes) == (1, 5, len('{"id": "cut'))
    assert out.read_text() == "".join(line for i, line in enumerate(lines) if i != 2)
    assert read_done(out).from_index == 4  # the index the pass wrote

    ids_path(out).unlink()
    out.write_text("".join(lines[:2]) + "\n" + lines[0])
    with pytest.raises(BatchOutputError, match=rf"line 4: .*:4: duplicate id '{data[0].id}' \(first on line 1\)"):
        read_done(out)
