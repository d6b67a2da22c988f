"""Tool errors in text observations (issue 19, item 7): the families `tool_error_family` recognizes, and
the successful outputs that mention "error" without being one. Strings marked (real) are copied from the
shipped data under evals/data/ (file named in the comment); the rest are the usual forms the tools print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.formats._tool_errors import TOOL_ERROR_FAMILIES, looks_like_tool_error, tool_error_family
from rubricforge_dspy.evidence.features import feature_values
from rubricforge_dspy.evidence.render import render_trajectory

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"

POSITIVES = [
    # (family, text)
    ("error_prefix", "Error: not enough seats on flight HAT229"),  # real: tau_bench_official
    ("error_prefix", "Error: payment method not found"),  # real: tau_bench_official
    ("error_prefix", "Unknown action search_flights"),
    ("error_prefix", '# var_3 = "Error: user not found"'),
    # real: openhands
    ("error_label", "ERROR:\nNo replacement was performed, old_str `DEF(idseqsingle);` did not appear verbatim"),
    ("error_label", "error: pathspec 'feature' did not match any file(s) known to git"),
    ("error_label", "fatal: not a git repository (or any of the parent directories): .git"),
    ("error_label", "ERROR: Could not find a version that satisfies the requirement nosuchpkg"),
    ("error_label", "Fatal error: Uncaught Error: Call to undefined function foo()"),
    ("shell", "bash: foo: command not found"),
    ("shell", "/bin/bash: line 1: pytset: command not found"),
    ("shell", "sh: 1: jq: not found"),
    ("shell", "cat: /app/missing.txt: No such file or directory"),
    ("shell", "ls: cannot access 'build': No such file or directory"),
    ("shell", "total 0\nmkdir: cannot create directory '/root/x': Permission denied"),
    ("shell", "rm: cannot remove 'dir': Is a directory"),
    ("shell", "EACCES: permission denied, mkdir '/app'"),  # real: atif/openagents-regex-log
    ("shell", "Error: ENOENT: no such file or directory, open 'config.json'"[7:]),
    ("shell", "python3: can't open file '/app/run.py': [Errno 2] No such file or directory"),
    ("shell", "make: *** [Makefile:12: all] Error 2"),
    ("shell", "bash: syntax error near unexpected token `)'"),
    ("traceback", 'Traceback (most recent call last):\n  File "/app/x.py", line 3, in <module>\n    import numpy\n'
                  "ModuleNotFoundError: No module named 'numpy'"),
    ("traceback", "hello\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                  "    1/0\nZeroDivisionError: division by zero\n"),
    ("traceback", "KeyError: 'reservation_id'"),
    ("traceback", "sqlite3.OperationalError: no such table: users"),
    ("traceback", "Uncaught TypeError: Cannot read properties of undefined (reading 'x')"),
    ("traceback", 'Exception in thread "main" java.lang.NullPointerException\n\tat Main.main(Main.java:3)'),
    ("sql", "ERROR 1064 (42000): You have an error in your SQL syntax; check the manual"),
    ("sql", 'ERROR:  relation "users" does not exist\nLINE 1: SELECT * FROM users;'),
    ("sql", 'psql:init.sql:4: ERROR:  syntax error at or near "TABEL"'),
    ("sql", 'Parse error: near "SELEC": syntax error'),
    ("sql", "no such table: orders"),
    ("exit_code", "exit code 1"),
    ("exit_code", "Exit code 1\nsudo: a terminal is required to read the password"),  # real: atif/openagents-regex-log
    ("exit_code", "returncode: 2"),
    ("exit_code", "Exit status 127"),
    ("exit_code", "collected 3 items\n...\n[Command finished with exit code 1]"),
    ("exit_code", "Process exited with code -9"),
    ("exit_code", "<returncode>2</returncode>\n<output>\n</output>"),
    ("http", "404 Not Found"),
    ("http", "HTTP/1.1 500 Internal Server Error\nContent-Type: text/html"),
    ("http", "status_code: 503"),
    ("http", '{"status": 429, "detail": "rate limited"}'),
    ("http", "HTTP Error 403: Forbidden"),
    ("http", "requests failed\n500 Server Error: Internal Server Error for url: http://x/api"),
    ("json_error", '{"error": "user not found"}'),
    ("json_error", '{"error": {"code": 400, "message": "bad request"}, "data": null}'),
    ("json_error", '{"data": null, "errors": [{"message": "Cannot query field"}]}'),
    ("json_error", '{"status": "error", "message": "timeout"}'),
]

NEGATIVES = [
    "0 errors",
    "No errors found",
    "Found 0 errors in 3 files",
    "error_rate: 0.1",
    "src/error.py:12:def handle_error(e):",
    "grep -rn error .\n./lib/error.py:3:class MyError(Exception):",
    "tests/test_api.py::test_error_handling PASSED",
    "===== 12 passed, 0 errors in 0.42s =====",
    "exit code 0",
    "returncode: 0",
    "<returncode>0</returncode>\n<output>\ntotal 24\n-rwxr-xr-x 1 root root 368 existing_lint_error.py\n"
    "</output>",  # real: mini_swe
    "HTTP/1.1 200 OK",
    "status_code: 200",
    '{"error": null, "result": 3}',
    '{"error": false}',
    '{"errors": []}',
    '{"status": "ok", "reservation_id": "ZFA04Y"}',
    "255.0",  # real: tau_bench_official (a calculator result)
    "",
    "OK.",  # real: react_webshop
    '{"name": {"first_name": "Mia", "last_name": "Li"}, "address": {"address1": "975 Sunset Drive"}}',  # real: tau
    "The function raises ValueError when the input is negative.",
    "If the command exits with code 1, retry.",
    "Handled the Traceback (most recent call last) in the log parser",
    "def test_not_found():\n    assert client.get('/x').status_code == 404",
    "Your proposed edit has been applied. No syntax errors.",
    "[File: src/marshmallow/fields.py (1997 lines total)]\n1462: if precision not in units:\n"
    "1463:     msg = 'error'",  # real-ish: swe_agent
    "The file errors.log was created.",
    "warning: LF will be replaced by CRLF in README.md",
    "Successfully installed requests-2.31.0\nerror_handler registered",
    "Login returned 404 pages? No, all 200.",
    "ERRORS: none",
]


@pytest.mark.parametrize("family,text", POSITIVES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(POSITIVES)])
def test_failed_tool_outputs_are_marked_with_their_family(family, text):
    assert family == "json_error" or family in TOOL_ERROR_FAMILIES
    assert tool_error_family(text) == family
    assert looks_like_tool_error(text)


@pytest.mark.parametrize("text", NEGATIVES, ids=[f"neg-{i}" for i in range(len(NEGATIVES))])
def test_successful_outputs_that_mention_errors_are_not_marked(text):
    assert tool_error_family(text) is None
    assert not looks_like_tool_error(text)


def test_every_family_has_examples_on_both_sides():
    families = {f for f, _ in POSITIVES}
    assert families == set(TOOL_ERROR_FAMILIES) | {"json_error"}
    assert len(POSITIVES) >= 40 and len(NEGATIVES) >= 30


def test_shell_errors_reach_the_evidence_and_the_floor_features(tmp_path):
    """A generic JSONL trajectory whose tool printed a shell error: marked, rendered as (ERROR), counted."""
    messages = [{"role": "user", "content": "Run the tests."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytset"}'}},
                    {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "bash: pytset: command not found"},
                {"role": "tool", "tool_call_id": "c2", "content": "error_handling.py\ntest_errors.py"},
                {"role": "assistant", "content": "All tests pass."}]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "t1", "task_id": "t1", "messages": messages, "reward": 0}) + "\n")
    (t,) = load_trajectories(path)
    results = [s for s in t.steps if s.kind == "tool_result"]
    assert [r.is_error for r in results] == [True, False]
    assert t.n_tool_errors == 1
    assert feature_values(t)["tool_errors"] == 1.0
    assert "(ERROR)" in render_trajectory(t)


def test_inspect_tool_messages_read_their_text_when_no_error_field(tmp_path):
    record = json.loads((DATA / "inspect" / "log_read_sample.json").read_text())
    sample = record["samples"][0]
    sample["messages"] = [m for m in sample["messages"] if m.get("role") in ("user", "assistant")][:1] + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "k1", "function": "bash", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "k1", "function": "bash", "content": "Traceback (most recent call last):\n"
         "  File \"x.py\", line 1, in <module>\nNameError: name 'y' is not defined\n"},
        {"role": "assistant", "content": "Done."}]
    path = tmp_path / "log.json"
    path.write_text(json.dumps(record))
    (t,) = load_trajectories(path)
    assert [s.is_error for s in t.steps if s.kind == "tool_result"] == [True]


def test_shipped_data_marks_match_the_committed_measurement():
    """evals/results/tool_error_marks.json is what `python -m evals.tool_error_marks` gives on this checkout."""
    from evals.tool_error_marks import measure

    committed = json.loads((DATA.parent / "results" / "tool_error_marks.json").read_text())
    for name in ("openhands", "atif", "swe_agent", "tau_bench_official"):
        row = measure(DATA / name, sample=12)
        saved = committed["datasets"][name]
        assert {k: row[k] for k in ("observations", "before", "after", "families")} == \
            {k: saved[k] for k in ("observations", "before", "after", "families")}
        assert row["after"] >= row["before"] and row["unmarked_before"] == 0
