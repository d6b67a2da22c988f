"""Issue 33, item 2: one writer per labels journal, keyed on the file, not on its name. A journal with a second
name (a hard link) is refused before anything is appended, by the library and by `rubricforge review`; a
journal renamed while a review writes it is not opened by a second one. Each test states what the user sees."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rubricforge_dspy.apply.job import OutputLockedError
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.review.labels import LabelsFile, append_label
from tests.review.conftest import DEMO_DATA, DEMO_PROGRAM, DEMO_RUN, DEMO_VERDICTS, ROOT


@pytest.fixture
def linked(tmp_path):
    """A journal holding one label, and a hard link to it."""
    journal, link = tmp_path / "labels.jsonl", tmp_path / "alias.jsonl"
    append_label(journal, "t1", "pass", labeler="ann")
    os.link(journal, link)
    return journal, link


@pytest.mark.parametrize("name", ["link", "original"])
def test_a_hard_linked_journal_is_refused_by_either_name(linked, name):
    """User sees: opening a labels journal that has two names raises an InputError (exit 2) naming the file and
    the way out; nothing is appended."""
    journal, link = linked
    given = link if name == "link" else journal
    before = journal.read_bytes()
    with pytest.raises(InputError, match=f"{given}: the output has 2 names \\(hard links\\)"):
        append_label(given, "t2", "fail", labeler="bob")
    with pytest.raises(InputError, match="hard links"):
        LabelsFile(given, "bob").open()
    assert journal.read_bytes() == before


def test_review_with_a_hard_linked_labels_out_exits_2_at_once(linked):
    """User sees: `rubricforge review --labels-out L` (L a hard link) exits 2 with one line, serving nothing."""
    journal, link = linked
    before = journal.read_bytes()
    command = [sys.executable, "-m", "rubricforge_dspy.cli.main", "review", "--data", str(DEMO_DATA),
               "--verdicts", str(DEMO_VERDICTS), "--program", str(DEMO_PROGRAM), "--allow-unverified-program",
               "--run-dir", str(DEMO_RUN), "--labels-out", str(link), "--labeler", "cli", "--port", "0"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # today's code serves the page: stop it
            process.kill()
            process.wait()
    assert process.returncode == 2, (out, err)
    assert "review page" not in out and f"{link}: the output has 2 names (hard links)" in err, err
    assert "Traceback" not in err
    assert journal.read_bytes() == before


def test_a_journal_renamed_while_a_review_writes_it_is_not_opened_twice(tmp_path):
    """User sees: a review holds ``labels.jsonl``; the file is renamed (linked to a new name, the old one
    removed); a second review on the new name is refused with the first one's pid."""
    journal, renamed = tmp_path / "labels.jsonl", tmp_path / "renamed.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from rubricforge_dspy.review.labels import LabelsFile\n"
        "with LabelsFile(sys.argv[2], 'ann') as labels:\n"
        " labels.label('t1', 'pass'); print('held', flush=True); time.sleep(120)"), str(ROOT), str(journal)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        os.link(journal, renamed)
        os.unlink(journal)
        with pytest.raises(OutputLockedError, match=f"pid {holder.pid}"):
            LabelsFile(renamed, "bob").open()
    finally:
        holder.kill()
        holder.wait()
    with LabelsFile(renamed, "bob") as labels:  # the first review is gone
        labels.label("t2", "fail")
    assert len(renamed.read_text().splitlines()) == 2
