"""The mapping functions (split, lines, regex_findall, file, index, key), `records.filter`, and the bounds on
regex_findall (docs/MAPPING.md, "Functions")."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.data.formats import LoadReport
from rubricforge_dspy.data.formats.mapping import MapStats, iter_mapped, load_mapping
from rubricforge_dspy.data.formats.mapping.functions import MAX_REGEX_INPUT, pattern_problem


def _mapping(tmp_path, document, name="map.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


HISTORY = ("Action: search[Paris]\nObservation: Paris is the capital of France.\n"
           "Action: lookup[population]\nObservation: 2.1 million\n"
           "Action: finish[2.1 million]")


def test_a_one_string_action_history_splits_into_steps(tmp_path):
    """An action history held in one text field (a ReAct transcript) becomes one step per action, each with
    the observation that answered it: `split` cuts the string, JMESPath projects the pieces."""
    mapping = _mapping(tmp_path, {
        "name": "react_text", "records": {"from": "jsonl"}, "id": "id", "task": "question",
        "steps": {"path": "split(transcript, 'Action: ')[1:]",
                  "action": "split(@, '\nObservation: ')[0]",
                  "observation": "split(@, '\nObservation: ')[1]"},
        "reward": "r"})
    data = _jsonl(tmp_path / "d.jsonl", [{"id": "a", "question": "How many people live in Paris?",
                                          "transcript": HISTORY, "r": 1}])
    trajectory, = iter_mapped(data, mapping)
    calls = [s for s in trajectory.steps if s.kind == "tool_call"]
    results = [s for s in trajectory.steps if s.kind == "tool_result"]
    assert [c.arguments for c in calls] == ["search[Paris]", "lookup[population]", "finish[2.1 million]"]
    assert [r.content.strip() for r in results] == ["Paris is the capital of France.", "2.1 million"]
    assert [r.call_id for r in results] == [c.call_id for c in calls[:2]]


def test_lines_and_regex_findall_read_steps_out_of_text(tmp_path):
    mapping = _mapping(tmp_path, {
        "name": "regex_text", "records": {"from": "jsonl"}, "id": "id", "task": "q",
        "actions": "regex_findall(transcript, '(?m)^Action: (.*)$')",
        "observations": "regex_findall(transcript, '(?m)^Observation: (.*)$')",
        "thoughts": "[lines(notes)[0], lines(notes)[1], lines(notes)[2]]"})
    data = _jsonl(tmp_path / "d.jsonl", [{"id": "a", "q": "t", "transcript": HISTORY,
                                          "notes": "look it up\nfind the number\ndone"}])
    trajectory, = iter_mapped(data, mapping)
    kinds = [s.kind for s in trajectory.steps]
    assert kinds.count("tool_call") == 3 and kinds.count("tool_result") == 2
    assert [s.content for s in trajectory.steps if s.kind == "assistant"] == ["look it up", "find the number", "done"]


def test_file_and_index_make_ids_unique_across_model_folders(tmp_path):
    """`<model>/overall.json` layouts: every file has the same stem, so ids made from `file()` (its path under
    the data folder) stay unique where the stem would collide."""
    for model in ("gpt-4", "llama"):
        folder = tmp_path / "runs" / model
        folder.mkdir(parents=True)
        (folder / "overall.json").write_text(json.dumps([{"q": "t1", "a": "x"}, {"q": "t2", "a": "y"}]))
    mapping = _mapping(tmp_path, {
        "name": "overall", "records": {"from": "json", "path": "@", "glob": "*/overall.json"},
        "id": "join('#', [file(), to_string(index())])", "agent": "split(file(), '/')[0]",
        "task": "q", "final_answer": "a"})
    report = LoadReport()
    loaded = list(iter_mapped(tmp_path / "runs", mapping, on_error="skip", report=report))
    assert [t.id for t in loaded] == ["gpt-4/overall#0", "gpt-4/overall#1", "llama/overall#0", "llama/overall#1"]
    assert [t.agent for t in loaded] == ["gpt-4", "gpt-4", "llama", "llama"] and not report.skipped
    # $file is the same name: the path under the folder, the suffix dropped
    plain = _mapping(tmp_path, {"name": "overall_plain", "records": {"from": "json", "glob": "*/overall.json"},
                                "id": "$file", "task": "q", "final_answer": "a"})
    report = LoadReport()
    names = [t.id for t in iter_mapped(tmp_path / "runs", plain, on_error="skip", report=report)]
    assert names[:1] == ["gpt-4/overall"] and len(report.skipped) == 2  # duplicates named, never silent


def test_a_jsonl_filter_keeps_the_records_it_is_true_on_and_counts_the_rest(tmp_path):
    mapping = _mapping(tmp_path, {"name": "filtered", "records": {"from": "jsonl", "filter": "kind == 'episode'"},
                                  "id": "id", "task": "q", "final_answer": "a"})
    rows = [{"id": "1", "kind": "episode", "q": "t", "a": "x"}, {"id": "h", "kind": "header"},
            {"id": "2", "kind": "episode", "q": "t", "a": "y"}, {"id": "s", "kind": "summary"}]
    stats = MapStats()
    loaded = list(iter_mapped(_jsonl(tmp_path / "d.jsonl", rows), mapping, stats=stats))
    assert [t.id for t in loaded] == ["1", "2"] and stats.filtered == 2 and stats.records == 2
    assert load_mapping(mapping).filter_text == "kind == 'episode'"


@pytest.mark.parametrize("pattern, words", [
    ("(a+)+b", "itself repeats"), ("(x*)*", "itself repeats"), ("(?:ab+){2,}", "itself repeats"),
    (r"(a)\1", "backreference"), ("a" * 201, "at most 200"), ("(", "not a regular expression"),
])
def test_an_unsafe_pattern_is_refused(pattern, words):
    assert words in pattern_problem(pattern)


@pytest.mark.parametrize("pattern", ["(?m)^Action: (.*)$", r"\d+", "(a|b)+c", r"Thought: ([^\n]*)"])
def test_a_usual_pattern_is_taken(pattern):
    assert pattern_problem(pattern) is None


def test_an_unsafe_pattern_or_a_long_string_is_a_bad_record_naming_the_limit(tmp_path):
    mapping = _mapping(tmp_path, {"name": "regex_bad", "records": {"from": "jsonl"}, "id": "id",
                                  "task": "q", "actions": "regex_findall(t, p)"})
    rows = [{"id": "1", "q": "x", "t": "aaaa", "p": "(a+)+$"},
            {"id": "2", "q": "x", "t": "a" * (MAX_REGEX_INPUT + 1), "p": "a"},
            {"id": "3", "q": "x", "t": "ab", "p": "a"}]
    report = LoadReport()
    loaded = list(iter_mapped(_jsonl(tmp_path / "d.jsonl", rows), mapping, on_error="skip", report=report))
    assert [t.id for t in loaded] == ["3"]
    problems = [problem for _, _, problem in report.skipped]
    assert "itself repeats" in problems[0] and f"at most {MAX_REGEX_INPUT:,} characters" in problems[1]


_EXPRESSIONS = ["a", "a.b", "a[0]", "a[-1].c", "@", "a || b", "a && b", "!a", "map(&[!@][0], v)", "map(&!@, v)",
                "to_string(a)", "join(':', [a, to_string(b)])", "join('-', [s, s])", "a == `false`", "a != b",
                "[a][0]", "[a, b][1]", "[a][3]", "split(s, ',')", "length(v)", "not_null(a, b)", "map(&a, v)",
                "v[0] == `1`", "to_string(v)", "a.b.c || `\"none\"`"]
_DOCUMENTS = [{"a": 1, "b": True, "v": [True, False, None], "s": "x,y"}, {"a": None, "b": 0, "v": [], "s": ""},
              {"a": {"b": 2, "c": 3}, "v": [{"a": 1}, 2], "s": "q"}, {"a": [1, {"c": 5}], "b": "", "v": [1, True]},
              None, [1, 2], "str", {"a": False, "b": [], "v": [0, False], "s": "a,b"}]


@pytest.mark.parametrize("text", _EXPRESSIONS)
def test_a_field_read_without_the_interpreter_gives_what_the_interpreter_gives(text):
    """Most fields are read by plain Python functions (the CPU of a mapped read); each gives the interpreter's
    value, of the same type, or the same kind of error, on every document."""
    import jmespath

    from rubricforge_dspy.data.formats.mapping.functions import OPTIONS
    from rubricforge_dspy.data.formats.mapping.spec import compile_field

    field = compile_field(text, "m.json", "id")
    for document in _DOCUMENTS:
        try:
            want, want_error = jmespath.search(text, document, options=OPTIONS), None
        except jmespath.exceptions.JMESPathError as exc:
            want, want_error = None, type(exc)
        try:
            got, got_error = field(document), None
        except jmespath.exceptions.JMESPathError as exc:
            got, got_error = None, type(exc)
        assert (got, type(got), got_error) == (want, type(want), want_error), (text, document)
