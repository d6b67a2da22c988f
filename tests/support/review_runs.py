"""Runs for the review page's tests, made with the package's own commands: `rubricforge judge` against the fake
OpenAI server (a scripted LM over HTTP: every request answered with the same verdict), and `rubricforge render`
for the text the judge read. Both run in this process (`cli.main.main`), so they import the worktree's code."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.testing.fake_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
DEMO_DATA = ROOT / "rubricforge_dspy" / "pipeline" / "demo-gpt-4o-airline.json"
PROGRAM = ROOT / "programs" / "airline-smollm2-135m.json"  # render 900 tokens, 700 step chars


def judge(out: Path, *options: str, data: Path = DEMO_DATA, limit: int = 4) -> Path:
    """`rubricforge judge --data DATA --out OUT --limit N OPTIONS` against the fake server; returns `out`."""
    with FakeOpenAI(responder=lambda body, n: {"reason": f"criterion 1 holds (request {n})", "passed": n % 2 == 0,
                                               "score": 0.9 if n % 2 == 0 else 0.2}) as fake:
        code = main(["judge", "--data", str(data), "--out", str(out), "--api-base", fake.api_base, "--model",
                     fake.model, "--no-cache", "--limit", str(limit), "--concurrency", "1", *options])
    assert code == 0, f"rubricforge judge exited {code}"
    return out


def rendered(index: int, *options: str, data: Path = DEMO_DATA) -> str:
    """What `rubricforge render --data DATA --index INDEX OPTIONS` prints (without print's final newline)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["render", "--data", str(data), "--index", str(index), *options])
    assert code == 0, f"rubricforge render exited {code}"
    return out.getvalue()[:-1]


def data_index(data: Path = DEMO_DATA) -> dict[str, int]:
    """id -> the trajectory's place in `data` (what `render --index` takes)."""
    return {t.id: number for number, t in enumerate(load_trajectories(data))}


def verdict_ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def write_run(directory: Path, ids: list[str], *, tasks: list[str] | None = None, contents: list[str] | None = None,
              **fields) -> tuple[Path, Path]:
    """A generic JSONL data file (one short trajectory per id) and a verdict file over it.

    Args:
        directory: where to write ``data.jsonl`` and ``verdicts.jsonl``.
        ids: the trajectory ids.
        tasks: their task names (default ``task-<n>``).
        contents: the user's first message of each (default a short request).
        fields: more fields of every verdict line (``reason``, ``stage``, ``agent``...).
    """
    data, verdicts = directory / "data.jsonl", directory / "verdicts.jsonl"
    rows, lines = [], []
    for number, ident in enumerate(ids):
        task = tasks[number] if tasks else f"task-{number}"
        content = contents[number] if contents else f"Please book flight HAT00{number}."
        rows.append({"id": ident, "task_id": task, "domain": "airline", "agent": fields.get("agent", "agent-1"),
                     "reward": 1.0, "messages": [
                         {"role": "user", "content": content},
                         {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                          "function": {"name": "book_reservation", "arguments": {"flight": "HAT001"}}}]},
                         {"role": "tool", "tool_call_id": "c1", "name": "book_reservation", "content": "booked"},
                         {"role": "assistant", "content": "Your flight is booked."}]})
        lines.append({"id": ident, "task_id": task, "passed": number % 2 == 0, "score": 0.8 if number % 2 == 0
                      else 0.3, "abstained": False, "reason": "criterion 1 holds", **fields})
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    verdicts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return data, verdicts
