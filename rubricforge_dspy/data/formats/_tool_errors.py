"""Tool outputs that report a failure: the families of error text every loader marks with
``Step.is_error`` (`tool_error_family`, `looks_like_tool_error`)."""

from __future__ import annotations

import json
import re

# Tool outputs that report a failure, by family. Precision matters more than recall: a successful output
# that merely mentions an error ("0 errors", "No errors found", "error_rate: 0.1", grep hits in error.py,
# "test_error_handling PASSED", "exit code 0", "HTTP/1.1 200 OK", '{"error": null}') must never match,
# so every pattern is anchored at the start of the output (\A) or of a line (^, MULTILINE) and names a
# failure form that tools print, not a word. Examples of each family are in tests/data/test_tool_errors.py and
# counts on the shipped data in evals/results/tool_error_marks.json (`python -m evals.tool_error_marks`).
_ERRNO_NAMES = ("ENOENT|EACCES|EPERM|EEXIST|ENOTDIR|EISDIR|ENOTEMPTY|ECONNREFUSED|ECONNRESET|ETIMEDOUT|"
                "EADDRINUSE|ENOSPC|EROFS|EMFILE|ENOTFOUND|EAI_AGAIN|EPIPE")
_HTTP_REASONS = ("Bad Request|Unauthorized|Payment Required|Forbidden|Not Found|Method Not Allowed|Not Acceptable|"
                 "Request Timeout|Conflict|Gone|Payload Too Large|Unprocessable (?:Entity|Content)|Too Many Requests|"
                 "Internal Server Error|Not Implemented|Bad Gateway|Service Unavailable|Gateway Timeout")
TOOL_ERROR_FAMILIES: dict[str, tuple[str, re.Pattern[str]]] = {
    # The rule before issue 19 (kept as is): tau-bench tools return "Error: ..." strings, unknown tool names
    # give "Unknown action <name>", the AgentVerify "assertions" agent wraps outputs as '# var_3 = "Error: ..."'.
    "error_prefix": ("output starts with 'Error', 'Unknown action'",
                     re.compile(r"""\A\s*(?:\#\s*var_\d+\s*=\s*["']?)?(?:Error\b|Unknown action\b)""")),
    # MySQL "ERROR 1064 (42000): ...", PostgreSQL "ERROR:  relation ... does not exist" (psql prefixes the
    # script name), SQLite shell "Parse error: ..." / "Runtime error: ...", "no such table: x".
    "sql": ("SQL engine errors: MySQL 'ERROR 1064 (42000):', PostgreSQL 'ERROR:  ...', SQLite 'Parse error:', "
            "'no such table:'",
            re.compile(r"^(?:psql:[^\n]{0,200}?: )?ERROR:  \S|^ERROR \d{3,5} \([0-9A-Z]{5}\)(?: at line \d+)?:"
                       r"|^(?:Parse|Runtime) error(?: near line \d+)?:"
                       r"|^no such (?:table|column|function): \S", re.MULTILINE)),
    # git ("error: pathspec ...", "fatal: not a git repository"), pip ("ERROR: Could not find ..."),
    # compilers and CLIs that lead with a lower- or upper-case error label and a colon.
    "error_label": ("output starts with 'error:', 'ERROR:', 'fatal:', 'Fatal error:', 'Exception:'",
                    re.compile(r"\A\s*(?:error|ERROR|fatal|FATAL|Fatal error|Exception|EXCEPTION|Execution error)"
                               r"(?:\s*\[[^\]\n]{0,40}\])?\s*:")),
    # bash/sh/zsh diagnostics and coreutils-style "prog: [object: ]reason" lines (the whole line is the
    # diagnostic: a grep hit "src/a.py:12: # No such file" has no space after the first colon and text
    # after the reason), dash's "sh: 1: foo: not found", make's "*** ... Error 2", errno names (Node's
    # "EACCES: permission denied, mkdir '/app'") and Python's "[Errno 2] ...".
    "shell": ("shell and OS diagnostics: 'bash: x: command not found', 'cat: x: No such file or directory', "
              "'Permission denied', 'sh: 1: x: not found', make '*** Error 2', 'ENOENT:', '[Errno 2]'",
              re.compile(r"^[\w.+/~-]{1,80}(?:: line \d+)?: (?:[^\n]{0,300}?: )?(?:\[Errno \d+\] )?"
                         r"(?:command not found|No such file or "
                         r"directory|Permission denied|Is a directory|Not a directory|Operation not permitted|"
                         r"Directory not empty|File exists|Read-only file system|No space left on device)\s*$"
                         r"|^(?:/bin/)?(?:ba|da|z|k)?sh: \d+: [^\n]{1,200}: not found\s*$"
                         r"|^(?:/bin/)?(?:ba|z)?sh: (?:line \d+: )?syntax error\b"
                         r"|^(?:g?make|ninja)(?:\[\d+\])?: \*\*\* [^\n]*\bError \d+"
                         rf"|^\s*(?:Error: )?(?:{_ERRNO_NAMES})[:,] "
                         r"|^\s*(?:[\w.]+: )?\[Errno \d+\] ", re.MULTILINE)),
    # A Python traceback header followed by its exception line, or an output that is an exception line
    # ("KeyError: 'x'", "sqlite3.OperationalError: ...", "Uncaught TypeError: ..."), or a Java crash.
    "traceback": ("Python traceback (header and exception line), an output that starts with 'XError:' / "
                  "'XException:', Java 'Exception in thread'",
                  re.compile(r"^Traceback \(most recent call last\):\s*\n(?:.*\n)*?[A-Za-z_][\w.]*"
                             r"(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b[^\n]*$"
                             r"|\A\s*(?:Uncaught )?(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::\s|\s*\Z)"
                             r"|^Exception in thread \S", re.MULTILINE)),
    # A non-zero exit status reported on its own line: "Exit code 1", "exit status 127", "returncode: 2",
    # "[Command finished with exit code 1]" (OpenHands), "Process exited with code 2", mini-SWE's
    # "<returncode>1</returncode>". "exit code 0" and sentences that mention codes mid-line do not match.
    "exit_code": ("non-zero exit status on its own line: 'Exit code 1', 'returncode: 2', 'Exit status 127', "
                  "'[Command finished with exit code 1]', '<returncode>1</returncode>'",
                  re.compile(r"(?im)^[ \t]*[\[(*]?[ \t]*(?:(?:the )?(?:command|process|program|script|subprocess|"
                             r"task|job|container)\b[^\n]{0,60}?\b(?:exited|failed|finished|completed|terminated|"
                             r"returned) with (?:a )?(?:non-zero )?(?:exit )?(?:code|status)|exit[ _-]?(?:code|status)|"
                             r"return[ _-]?code|returncode)[ \t]*[:=]?[ \t]*(?:-[1-9]\d*|[1-9]\d*)\b"
                             r"|<returncode>\s*(?:-\d+|[1-9]\d*)\s*</returncode>")),
    # HTTP error statuses: a status line, a status field with a 4xx/5xx value, or an output that starts
    # with the code and its reason phrase ("404 Not Found", "HTTP Error 503: ...", "500 Server Error: ...").
    "http": ("HTTP 4xx/5xx: 'HTTP/1.1 500', 'status_code: 503', '404 Not Found', 'HTTP Error 404:'",
             re.compile(r"^\s*HTTP/\d(?:\.\d)?\s+[45]\d\d\b"
                        r"|^\s*[{,]?\s*[\"']?(?:status|status_?code|statusCode|http_?status|http_?code)[\"']?\s*[:=]"
                        r"\s*[\"']?[45]\d\d\b"
                        rf"|\A\s*(?:HTTP Error )?[45]\d\d:?\s+(?:{_HTTP_REASONS})\b"
                        r"|^\s*[45]\d\d (?:Client|Server) Error:", re.MULTILINE)),
}
_JSON_ERROR_KEYS = ("error", "errors")
_JSON_CAP = 200_000  # longer outputs are not parsed as JSON (cost), only matched by the line patterns


def _json_error(content: str) -> bool:
    """A JSON object whose top-level ``error``/``errors`` is set (not null, false, empty) or ``status: error``."""
    text = content.strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > _JSON_CAP:
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    if any(value.get(key) not in (None, False, "", [], {}, 0) for key in _JSON_ERROR_KEYS if key in value):
        return True
    return isinstance(value.get("status"), str) and value["status"].strip().lower() in ("error", "failed", "failure")



def tool_error_family(content: str | None) -> str | None:
    """The family of failure a tool output reports, or None when it reads as a success.

    Families (see `TOOL_ERROR_FAMILIES`): ``error_prefix`` (``Error: ...``, ``Unknown action``),
    ``error_label`` (``error:``, ``fatal:``, ``ERROR:``), ``shell`` (``command not found``, ``No such file
    or directory``, ``Permission denied``, errno names), ``traceback`` (Python tracebacks, exception lines),
    ``sql``, ``exit_code`` (a non-zero exit status on its own line), ``http`` (4xx/5xx statuses) and
    ``json_error`` (a JSON object with a set ``error``). The first family that matches is returned.

    Args:
        content: The tool output as text (None or empty reads as a success).

    Returns:
        The family name, or None.
    """
    if not content:
        return None
    for name, (_, pattern) in TOOL_ERROR_FAMILIES.items():
        if pattern.search(content):
            return name
    return "json_error" if _json_error(content) else None


def looks_like_tool_error(content: str | None) -> bool:
    """True for tool outputs that report a failure (any family of `tool_error_family`).

    Args:
        content: The tool output as text.

    Returns:
        Whether the text reads as a failed tool call.
    """
    return tool_error_family(content) is not None

