"""The labels journal the review page writes: last line wins, undo is a new line, one writer, fsync'd lines,
and every ``--labels`` reader reads it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rubricforge_dspy.apply.job import OutputLockedError
from rubricforge_dspy.data.label_journal import JOURNAL_KEY, journal_history, read_journal
from rubricforge_dspy.data.labels import LabelFileError, read_label_file
from rubricforge_dspy.review.labels import LabelsFile, append_label, read_labels
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


def test_a_torn_last_line_is_cut_before_the_next_append(tmp_path):
    path = tmp_path / "labels.jsonl"
    append_label(path, "a", "pass", labeler="ana")
    with path.open("ab") as handle:
        handle.write(b'{"rubricforge_labels": 1, "id": "b", "lab')  # a kill mid-write
    assert list(journal_history(path).states) == ["a"]  # the reader skips the torn tail
    append_label(path, "c", "fail", labeler="ana")
    assert [l["id"] for l in journal_lines(path)] == ["a", "c"]


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
