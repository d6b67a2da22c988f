"""The labels journal the review page writes: last line wins, undo is a new line, one writer, fsync'd lines,
and every ``--labels`` reader reads it."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from rubricforge_dspy.apply.job import OutputLockedError
from rubricforge_dspy.data.label_journal import JOURNAL_KEY, journal_history, read_journal
from rubricforge_dspy.data.labels import LabelFileError, read_label_file
from rubricforge_dspy.review.labels import LabelNotSavedError, LabelsFile, append_label, read_labels
from tests.review.conftest import ROOT, journal_lines


def test_a_changed_mind_is_a_new_line_and_the_last_line_wins(tmp_path):
    path = tmp_path / "labels.jsonl"
    with LabelsFile(path, "ana") as labels:
        labels.label("a", "pass", "looks right")
        labels.label("b", "fail")
        labels.label("a", "fail", "missed the refund")
        labels.label("c", "skip", "unclear")
    lines = journal_lines(path)
    assert [(l["id"], l["label"], l["skip"]) for l in lines] == [("a", 1, False), ("b", 0, False), ("a", 0, False),
                                                                  ("c", None, True)]
    assert all(l[JOURNAL_KEY] == 1 and l["labeler"] == "ana" and l["time"] for l in lines)
    resolved = read_labels(path)
    assert {k: e.label for k, e in resolved.entries.items()} == {"a": 0, "b": 0}
    assert resolved.blank == ["c"]  # a skip joins nothing, like a blank row


def test_undo_appends_the_previous_state_and_replays_the_same_after_a_restart(tmp_path):
    path = tmp_path / "labels.jsonl"
    with LabelsFile(path, "ana") as labels:
        labels.label("a", "pass")
        labels.label("b", "fail", "wrong date")
        labels.label("b", "pass")
        undone = labels.undo()  # b back to fail
        assert (undone.id, undone.label, undone.note, undone.undo) == ("b", 0, "wrong date", True)
        undone = labels.undo()  # b back to unlabeled
        assert (undone.id, undone.label, undone.skip) == ("b", None, False)
        assert labels.state("b") is None and labels.state("a").label == 1
    size = path.stat().st_size
    with LabelsFile(path, "bo") as labels:  # reopened: the history is replayed from the file
        assert labels.state("b") is None and labels.state("a").label == 1
        assert labels.undo().id == "a"  # the next undo takes back the oldest action still standing
        assert labels.undo() is None  # nothing left: no line written
    assert len(journal_lines(path)) == 6 and path.stat().st_size > size
    with pytest.raises(LabelFileError, match="no labels"):
        read_journal(path)  # every id is back to unlabeled


def test_a_torn_last_line_is_cut_kept_aside_and_reported_before_the_next_append(tmp_path, caplog):
    path = tmp_path / "labels.jsonl"
    append_label(path, "a", "pass", labeler="ana")
    torn = b'{"rubricforge_labels": 1, "id": "b", "lab'
    with path.open("ab") as handle:
        handle.write(torn)  # a kill mid-write
    assert list(journal_history(path).states) == ["a"]  # the reader skips the torn tail
    with caplog.at_level(logging.WARNING), LabelsFile(path, "ana") as labels:
        labels.label("c", "fail")
        (side,) = tmp_path.glob("labels.jsonl.torn-*")
        assert side.read_bytes() == torn  # the torn text is kept beside the journal
        (notice,) = labels.notices
        assert "torn" in notice and str(side) in notice
    assert str(side) in caplog.text  # printed too (the command line shows warnings)
    assert [l["id"] for l in journal_lines(path)] == ["a", "c"]


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "labels.jsonl"
    append_label(path, "a", "pass", labeler="ana")
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # e.g. written by hand or by another tool
    with LabelsFile(path, "ana") as labels:
        assert labels.state("a").label == 1 and labels.notices == []
        labels.label("b", "fail")
    assert [(l["id"], l["label"]) for l in journal_lines(path)] == [("a", 1), ("b", 0)]
    assert list(tmp_path.glob("*.torn-*")) == []


@pytest.mark.parametrize("fails", ["write", "fsync"])
def test_a_full_disk_mid_run_loses_no_label_before_or_after_it(tmp_path, monkeypatch, fails):
    """The 5th label meets a full disk (half its line written, then ENOSPC) or a failing disk (EIO at fsync):
    that label is refused with "not saved", the file is cut back to its length before it, and the 32 labels
    after it are read by the page (a reopened journal) and by every --labels reader."""
    path = tmp_path / "labels.jsonl"
    real_write, real_fsync = os.write, os.fsync
    calls = {"write": 0, "fsync": 0}
    labels = LabelsFile(path, "ana").open()

    def write(fd, data):
        if fd == labels._fd:
            calls["write"] += 1
            if fails == "write" and calls["write"] == 5:
                real_write(fd, bytes(data[:len(data) // 2]))  # half the line reaches the disk
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def fsync(fd):
        if fd == labels._fd:
            calls["fsync"] += 1
            if fails == "fsync" and calls["fsync"] == 5:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    try:
        for k in range(4):
            labels.label(f"id{k}", "pass")
        with pytest.raises(LabelNotSavedError, match="not saved") as refused:
            labels.label("id4", "fail")
        assert os.strerror(errno.ENOSPC if fails == "write" else errno.EIO) in str(refused.value)
        assert labels.state("id4") is None  # the page does not show it as labeled
        for k in range(5, 37):
            labels.label(f"id{k}", "fail")
    finally:
        monkeypatch.undo()
        labels.close()
    wanted = {f"id{k}": 1 if k < 4 else 0 for k in range(37) if k != 4}
    assert {l["id"]: l["label"] for l in journal_lines(path)} == wanted  # every line whole
    with LabelsFile(path, "ana") as reopened:  # the page at its next start
        assert {i: s[-1].label for i, s in reopened.history.states.items()} == wanted and reopened.notices == []
    assert {i: e.label for i, e in read_label_file(path).entries.items()} == wanted  # certify, --labels


def test_a_failed_write_that_cannot_be_cut_back_stops_the_file_and_a_restart_repairs_it(tmp_path, monkeypatch):
    path = tmp_path / "labels.jsonl"
    real_write = os.write
    labels = LabelsFile(path, "ana").open()
    labels.label("a", "pass")

    def write(fd, data):
        if fd == labels._fd:
            real_write(fd, bytes(data[:12]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def ftruncate(fd, size):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    try:
        with pytest.raises(LabelNotSavedError, match="nor cut back"):
            labels.label("b", "fail")
        monkeypatch.undo()
        with pytest.raises(LabelNotSavedError, match="takes no more labels"):  # nothing glued to the half line
            labels.label("c", "fail")
    finally:
        monkeypatch.undo()
        labels.close()
    with LabelsFile(path, "ana") as restarted:  # the restart cuts the half line, keeping it aside
        (side,) = tmp_path.glob("labels.jsonl.torn-*")
        assert len(side.read_bytes()) == 12 and restarted.notices
        restarted.label("c", "fail")
    assert [(l["id"], l["label"]) for l in journal_lines(path)] == [("a", 1), ("c", 0)]


def test_a_journal_an_older_writer_tore_opens_with_every_whole_label_and_says_so(tmp_path):
    """A full disk under the old writer left half a line and the next label glued after it."""
    path = tmp_path / "labels.jsonl"
    with LabelsFile(path, "ana") as labels:
        for ident in ("a", "b", "c"):
            labels.label(ident, "pass")
    a, b, c = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(a + b[:20] + b + c)
    with LabelsFile(path, "ana") as labels:
        assert sorted(labels.history.states) == ["a", "b", "c"]
        (notice,) = labels.notices
        assert "1 torn line(s) inside (line 2)" in notice
        labels.label("d", "fail")
    read = read_label_file(path)
    assert sorted(read.entries) == ["a", "b", "c", "d"] and read.torn == [2]


@pytest.mark.parametrize("name, text", [
    ("labels.csv", "id,label\na,1\nb,0\n"),
    ("labels.json", json.dumps([{"id": "a", "label": 1}, {"id": "b", "label": 0}], indent=1)),
    ("labels.jsonl", '{"id": "a", "label": 1}\n{"id": "b", "label": 0}'),
    ("results.json", json.dumps({"resolved_ids": ["a"], "unresolved_ids": ["b"]})),
])
def test_labels_out_naming_a_file_that_is_not_a_journal_is_refused_untouched(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    before = path.read_bytes()
    with pytest.raises(LabelFileError, match="not a labels journal") as refused:
        LabelsFile(path, "ana").open()
    assert str(path) in str(refused.value)
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]


def test_a_second_writer_is_refused_while_the_first_holds_the_file(tmp_path):
    path = tmp_path / "labels.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from rubricforge_dspy.review.labels import LabelsFile
            labels = LabelsFile({str(path)!r}, "other").open()
            print("held", flush=True)
            sys.stdin.read()
        """)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # the lock is taken: no sleep needed
        with pytest.raises(OutputLockedError, match=f"pid {holder.pid}"):
            LabelsFile(path, "ana").open()
    finally:
        holder.stdin.close()
        holder.wait(30)
    append_label(path, "a", "pass", labeler="ana")  # released with its process
    assert journal_lines(path)[0]["id"] == "a"


def test_a_journal_without_repeated_ids_reads_through_the_generic_labels_reader(tmp_path):
    path = tmp_path / "labels.jsonl"
    with LabelsFile(path, "ana") as labels:
        labels.label("a", "pass", "note, with a comma")
        labels.label("b", "fail")
        labels.label("c", "skip")
    read = read_label_file(path)
    assert {k: e.label for k, e in read.entries.items()} == {"a": 1, "b": 0} and read.blank == ["c"]


def test_a_journal_with_a_changed_mind_reads_through_the_generic_labels_reader(tmp_path):
    path = tmp_path / "labels.jsonl"
    with LabelsFile(path, "ana") as labels:
        labels.label("a", "pass")
        labels.label("a", "fail")
    assert read_label_file(path).entries["a"].label == 0


def test_a_bad_choice_or_a_missing_labeler_is_refused(tmp_path):
    from rubricforge_dspy.core.errors import InputError

    with pytest.raises(InputError, match="labeler"):
        LabelsFile(tmp_path / "l.jsonl", " ")
    with LabelsFile(tmp_path / "l.jsonl", "ana") as labels, pytest.raises(InputError, match="pass, fail or skip"):
        labels.label("a", "maybe")
