"""One id -> verdict index of a verdict file (core.verdict.read_verdicts), used by every reader by id."""

import json

import pytest

from rubricforge_dspy.apply.job import BatchOutputError, read_done
from rubricforge_dspy.core.verdict import Verdict, VerdictLineError, read_verdicts
from rubricforge_dspy.report.records import RunError, read_predictions
from rubricforge_dspy.trust.gate import gate_verdict_files


def line(ident: str, passed: bool = True, label: int = 1, **extra) -> str:
    verdict = Verdict.from_answer(passed, 0.9 if passed else 0.1, "r")
    return json.dumps({"id": ident, "label": label, **verdict.to_dict(), **extra}) + "\n"


def test_the_index_maps_ids_to_lines_in_file_order(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text(line("b") + "\n" + line("a", passed=False))
    index = read_verdicts(path)
    assert list(index) == ["b", "a"] and index["a"]["passed"] is False
    assert index.lines == {"b": 1, "a": 3}


@pytest.mark.parametrize("reader", [read_verdicts, read_predictions, read_done,
                                    lambda p: gate_verdict_files(p, p)])
def test_every_reader_refuses_a_repeated_id_naming_file_and_lines(tmp_path, reader):
    path = tmp_path / "v.jsonl"
    path.write_text(line("a") + line("b") + line("a", passed=False))
    with pytest.raises((VerdictLineError, RunError, BatchOutputError)) as caught:
        reader(path)
    assert f"{path}:3: duplicate id 'a' (first on line 1)" in str(caught.value)


def test_a_line_that_is_not_a_verdict_names_file_and_line(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text(line("a") + '{"id": "b", "passed": "yes"}\n')
    with pytest.raises(VerdictLineError, match=rf"{path}:2: ") as caught:
        read_verdicts(path)
    assert caught.value.line == 2


def test_a_torn_last_line_is_an_error_unless_the_caller_tolerates_it(tmp_path):
    path = tmp_path / "v.jsonl"
    whole = line("a") + line("b")
    path.write_text(whole + line("c")[:20])
    with pytest.raises(VerdictLineError, match=rf"{path}:3: not JSON"):
        read_verdicts(path)
    index = read_verdicts(path, torn_tail=True)
    assert list(index) == ["a", "b"] and index.torn_bytes == 20 and index.complete_bytes == len(whole.encode())
    # resume tolerates it and cuts it away
    state = read_done(path)
    assert state.ids == {"a", "b"} and state.repaired_bytes == 20 and path.read_text() == whole


def test_resume_drops_abstentions_for_lm_errors_and_keeps_the_rest(tmp_path):
    path = tmp_path / "v.jsonl"
    timeout = json.dumps({"id": "t", **Verdict.abstention("timed out", "timeout").to_dict()}) + "\n"
    parse = json.dumps({"id": "p", **Verdict.abstention("no JSON", "parse").to_dict()}) + "\n"
    path.write_text(line("a") + timeout + parse)
    state = read_done(path)
    assert state.ids == {"a", "p"} and state.retried == 1
    assert list(read_verdicts(path)) == ["a", "p"]
