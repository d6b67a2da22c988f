"""Streaming ingest and O(1) resume (issue 20, items 1 and 3): the fast paths decide exactly what the
slow ones decided, files are read as streams, and resuming reads only what it must."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from rubricforge_dspy.apply.job import BatchOutputError, ids_path, read_done
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.core.verdict import Verdict, _surely_valid_line, verdict_line
from rubricforge_dspy.core.verdict import _validator as verdict_validator
from rubricforge_dspy.data.formats import iter_trajectories, jsonl, load_trajectories, trajectory_at
from rubricforge_dspy.data.formats._records import IdSet
from tests.support.ingest import AIRLINE, ODD_VALUES, WEBSHOP, _generic, _mutations, _records

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_structural_check_never_accepts_what_jsonschema_refuses():
    """User sees: a record refused before stays refused, with the same message (only valid records skip
    jsonschema). Checked on the shipped records and 2,400 random mutations of them."""
    rng = random.Random(20)
    validator = jsonl._validator()
    accepted = refused = 0
    for record in _records():
        assert jsonl._surely_valid(record)
        for mutated in _mutations(record, rng, 60):
            errors = list(validator.iter_errors(mutated))
            if jsonl._surely_valid(mutated):
                assert not errors, (mutated, errors[0].message)
                accepted += 1
            else:
                refused += 1
                problem = jsonl.validation_problem(mutated)
                assert (problem is None) == (not errors)
    assert accepted > 200 and refused > 200  # both sides were exercised


def test_the_verdict_line_check_never_accepts_what_jsonschema_refuses():
    rng = random.Random(3)
    trajectory = load_trajectories(AIRLINE)[0]
    base = [verdict_line(trajectory, Verdict.from_answer(True, 0.8, "ok"), judge_fingerprint="f" * 64),
            verdict_line(trajectory, Verdict.abstention("boom", "timeout"))]
    validator = verdict_validator()
    for record in base:
        assert _surely_valid_line(record)
        for _ in range(600):
            mutated = dict(record)
            mutated[rng.choice(list(record) + ["extra"])] = rng.choice(ODD_VALUES + [-0.5, 1.5, "parse"])
            if _surely_valid_line(mutated):
                assert not list(validator.iter_errors(mutated)), mutated


def test_id_set_finds_every_repeat_across_growth():
    seen = IdSet()
    ids = [f"traj-{i}" for i in range(50_000)]
    assert all(seen.add(i) for i in ids)
    assert not any(seen.add(i) for i in ids[::97])
    assert len(seen) == 50_000 and "traj-49999" in seen and "traj-50000" not in seen


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_stats_streams_and_counts_as_the_loaded_list_does(tmp_path, capsys):
    """User sees: `stats --json` gives the counts of the whole file (labeled, unlabeled, tasks, tool errors)."""
    rows = [_generic(i) for i in range(40)] + [_generic(40 + i, reward=None) for i in range(5)]
    data = _write(tmp_path / "d.jsonl", rows)
    assert main(["stats", "--json", "--data", str(data)]) == 0
    stats = json.loads(capsys.readouterr().out)
    loaded = load_trajectories(data)
    assert stats["trajectories"] == len(loaded) == 45 and stats["unlabeled"] == 5
    assert stats["positives"] == sum(t.label for t in loaded if t.label is not None) == 20
    assert stats["tasks"] == 3 and stats["tool_errors"] == sum(t.n_tool_errors for t in loaded) == 12


def test_a_repeated_id_late_in_a_file_is_still_named(tmp_path):
    data = _write(tmp_path / "d.jsonl", [_generic(i) for i in range(30)] + [_generic(7)])
    with pytest.raises(TrajectoryFormatError, match="duplicate trajectory id 't7'") as error:
        list(iter_trajectories(data))
    assert error.value.record == 30


def test_render_index_reads_one_record_not_the_ones_before(tmp_path, capsys):
    """User sees: `render --index 5` prints record 5 even when an earlier line is not JSON (it was never
    parsed), while `stats` on the same file names that line; past the end it says the range."""
    data = _write(tmp_path / "d.jsonl", [_generic(0), "{not json", *[_generic(i) for i in range(2, 7)]])
    assert main(["render", "--data", str(data), "--index", "5"]) == 0
    assert "do 5" in capsys.readouterr().out
    assert main(["stats", "--data", str(data)]) == 2
    assert "record 1" in capsys.readouterr().err
    assert main(["render", "--data", str(data), "--index", "7"]) == 2
    assert "out of range (0..6)" in capsys.readouterr().err
    found, count = trajectory_at(data, 2)
    assert found.id == "t2" and count == 3 and found.hidden["label_rule"] == "reward > 0"


def _verdicts(path: Path, ids, kind=None, mode="w") -> Path:
    trajectory = load_trajectories(AIRLINE)[0]
    with path.open(mode) as handle:
        for ident in ids:
            verdict = Verdict.abstention("x", kind) if kind else Verdict.from_answer(True, 0.9, "fine")
            line = verdict_line(trajectory, verdict, judge_fingerprint="fp")
            handle.write(json.dumps({**line, "id": ident}) + "\n")
    return path


def test_resume_reads_the_index_and_only_the_lines_appended_since(tmp_path):
    """Second read of a finished job comes from OUT.ids; lines appended later are read (and checked)."""
    out = _verdicts(tmp_path / "v.jsonl", [f"a{i}" for i in range(200)])
    first = read_done(out)
    assert first.ids == {f"a{i}" for i in range(200)} and first.from_index == 0 and ids_path(out).exists()
    again = read_done(out)
    assert again.ids == first.ids and again.from_index == 200 and again.fingerprints == {"fp"}
    _verdicts(out, ["b1", "b2"], mode="a")
    more = read_done(out)
    assert more.from_index == 200 and more.ids == first.ids | {"b1", "b2"}
    assert read_done(out).from_index == 202


def test_resume_after_the_index_keeps_every_guarantee(tmp_path):
    """A repeated id or a bad line appended after the index is refused naming the line; a torn last line
    is cut; an abstention for an LM error is asked again; a rewritten file is re-read in full."""
    out = _verdicts(tmp_path / "v.jsonl", [f"a{i}" for i in range(50)])
    read_done(out)
    _verdicts(out, ["a3"], mode="a")
    with pytest.raises(BatchOutputError, match=r"line 51.*duplicate id 'a3'"):
        read_done(out)

    out = _verdicts(tmp_path / "w.jsonl", [f"a{i}" for i in range(50)])
    read_done(out)
    with out.open("a") as handle:
        handle.write('{"id": "half')
    state = read_done(out)
    assert state.repaired_bytes == len('{"id": "half') and len(state.ids) == 50 and out.read_text().endswith("\n")

    _verdicts(out, ["t1"], kind="timeout", mode="a")
    state = read_done(out)
    assert state.retried == 1 and "t1" not in state.ids and '"t1"' not in out.read_text()
    assert read_done(out).from_index == 50

    inode = os.stat(out).st_ino
    _verdicts(out, [f"z{i}" for i in range(50)])  # rewritten in place (same inode): other ids
    assert os.stat(out).st_ino == inode
    state = read_done(out)
    assert state.ids == {f"z{i}" for i in range(50)} and state.from_index == 0


def test_new_step_is_the_dataclass_step_with_the_same_check():
    import dataclasses

    from rubricforge_dspy.core.trajectory import STEP_KINDS, Step
    from rubricforge_dspy.data.formats._steps import new_step

    for kind in STEP_KINDS:
        fields = dict(kind=kind, content="c", tool_name="t", arguments={"a": [1]}, call_id="id#2", is_error=True)
        fast, slow = new_step(**fields), Step(**fields)
        assert (fast, repr(fast), dataclasses.asdict(fast)) == (slow, repr(slow), dataclasses.asdict(slow))
        assert new_step(kind, "c") == Step(kind=kind, content="c")
        assert hash(new_step(kind, "c", "t", "text", "id")) == hash(Step(kind, "c", "t", "text", "id"))
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.content = "changed"
    with pytest.raises(ValueError) as fast_error:
        new_step("observation")
    with pytest.raises(ValueError) as slow_error:
        Step(kind="observation")
    assert str(fast_error.value) == str(slow_error.value)


def test_an_assistant_message_of_tool_calls_alone_is_still_read_as_actions():
    messages = [{"role": "user", "content": "book it"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "book", "arguments": "{\"x\": 1}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"},
                {"role": "assistant", "content": "booked"}]
    steps = jsonl.steps_of(messages)
    assert [(s.kind, s.tool_name, s.arguments) for s in steps] == [
        ("user", None, None), ("tool_call", "book", {"x": 1}), ("tool_result", "book", None),
        ("final_answer", None, None)]


def test_the_label_rule_stamp_leaves_the_readers_dict_alone(tmp_path):
    from rubricforge_dspy.core.trajectory import ANY_POSITIVE_REWARD
    from rubricforge_dspy.data.formats import _stamped

    trajectory = next(iter(load_trajectories(AIRLINE)))
    before = dict(trajectory.hidden)
    hidden = trajectory.hidden
    stamped = _stamped(trajectory, ANY_POSITIVE_REWARD)
    assert stamped.hidden["label_rule"] == str(ANY_POSITIVE_REWARD)
    assert hidden == before and stamped.hidden is not hidden


def test_stats_imports_neither_dspy_nor_scikit_learn(tmp_path):
    """`rubricforge stats` starts light: the floor's and the LM's heavy imports happen in their commands."""
    import subprocess
    import sys

    code = ("import sys; from rubricforge_dspy.cli.main import main; "
            f"rc = main(['stats', '--json', '--data', {str(WEBSHOP)!r}]); "
            "heavy = sorted(m for m in ('dspy', 'sklearn', 'scipy', 'litellm') if m in sys.modules); "
            "print('HEAVY', heavy, rc, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "HEAVY [] 0" in done.stderr, done.stderr[-2000:]
    assert json.loads(done.stdout)["trajectories"] == 500
