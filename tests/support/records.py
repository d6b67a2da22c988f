"""Input files for tests: records of the generic JSONL and tau-bench formats, and the writers of
trajectory and record files."""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.data.formats.jsonl import to_record


def jsonl_record(i: int, **changes) -> dict:
    record = {
        "id": f"run:t{i}:0",
        "task_id": f"t{i}",
        "messages": [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": f"Book flight {i}."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{\"n\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "Booked."},
        ],
        "reward": float(i % 2),
    }
    record.update(changes)
    return record


def tau_record(i: int, **changes) -> dict:
    record = {
        "task_id": i,
        "reward": 1.0,
        "trial": 0,
        "info": {"task": {"instruction": "secret instruction", "actions": []}, "reward_info": {"reward": 1.0}},
        "traj": [
            {"role": "system", "content": "# Retail agent policy"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "get_order_details", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "x", "name": "get_order_details",
             "content": "Error: order not found"},
            {"role": "assistant", "content": "Sorry, no such order."},
        ],
    }
    record.update(changes)
    return record


def write_lines(path: Path, lines: list) -> Path:
    """One line per item: bytes and str written as is, anything else JSON-encoded."""
    with open(path, "wb") as handle:
        for line in lines:
            if isinstance(line, str):
                line = line.encode()
            elif not isinstance(line, bytes):
                line = json.dumps(line).encode()
            handle.write(line + b"\n")
    return path


def write_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def write_labeled_jsonl(path, trajectories):
    """`trajectories` as generic JSONL records (with reward and label) at `path`; returns `path`."""
    path.write_text("".join(json.dumps(to_record(t, reward=t.reward, label=t.label)) + "\n" for t in trajectories))
    return path


def write_jsonl(path, trajectories):
    """`trajectories` as generic JSONL records (with reward and label) at `path`; returns it as a string."""
    with path.open("w") as handle:
        for t in trajectories:
            handle.write(json.dumps(to_record(t, reward=t.reward, label=t.label)) + "\n")
    return str(path)
