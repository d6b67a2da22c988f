"""`rubricforge stats` counts without building steps (issue 20, item 1): the counting path decides every
record exactly as the full loader does (same errors, same skipped records, same labels, same counts)."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from rubricforge_dspy.cli.data_options import stream_data
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.export import record_of
from rubricforge_dspy.data.formats import (
    LoadReport,
    TrajectoryCounts,
    iter_trajectories,
    iter_trajectory_counts,
    jsonl,
    load_trajectories,
)
from tests.support.ingest import AIRLINE, WEBSHOP, _generic, _mutations, _records

ROOT = Path(__file__).resolve().parents[2]


def _both(data, **options) -> tuple[list, LoadReport, list, LoadReport]:
    full_report, counts_report = LoadReport(), LoadReport()
    full = [TrajectoryCounts.of(t) for t in iter_trajectories(data, report=full_report, **options)]
    counted = list(iter_trajectory_counts(data, report=counts_report, **options))
    return full, full_report, counted, counts_report


def _shipped_as_generic(tmp_path: Path) -> Path:
    rows = [record_of(t) for t in load_trajectories([AIRLINE, WEBSHOP])]
    path = tmp_path / "shipped.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_counts_equal_the_loaded_trajectories_on_the_shipped_data(tmp_path):
    """User sees: the same trajectories, labels, rewards and tool-error counts from `stats` as from any
    loading command, on the 700 shipped episodes written as generic JSONL and on their own formats."""
    generic = _shipped_as_generic(tmp_path)
    for data in (generic, AIRLINE, WEBSHOP, ROOT / "tests/fixtures/adversarial/forgeries.jsonl",
                 ROOT / "evals/data/otel/constructed_otlp.jsonl",
                 ROOT / "evals/data/openhands/multi_swe_bench_output.jsonl"):
        for rule in (None, ">=1", 0.5):
            full, full_report, counted, counts_report = _both(data, label_threshold=rule)
            assert counted == full and len(counted) > 0
            assert counts_report == full_report
    full, _, counted, _ = _both(generic)
    assert sum(c.n_tool_errors for c in counted) == sum(t.n_tool_errors for t in load_trajectories(generic)) > 0
    assert {c.label for c in counted} == {0, 1}


@pytest.mark.slow
def test_count_refuses_every_mutated_record_as_convert_does():
    """User sees: a record the full loader refuses is refused by `stats` with the same message, and one it
    accepts is counted the same (2,400 random mutations of shipped records)."""
    rng = random.Random(41)
    outcomes = {"same error": 0, "same counts": 0}
    for record in _records():
        for mutated in _mutations(record, rng, 60):
            try:
                trajectory = jsonl.convert(mutated, path=Path("f"), index=3, threshold=0.0)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                with pytest.raises(type(exc)) as counted_error:
                    jsonl.count(mutated, path=Path("f"), index=3, threshold=0.0)
                assert str(counted_error.value) == str(exc)
                outcomes["same error"] += 1
                continue
            counts = jsonl.count(mutated, path=Path("f"), index=3, threshold=0.0)
            assert counts == TrajectoryCounts.of(trajectory)
            assert counts.n_steps == len(trajectory.steps)
            outcomes["same counts"] += 1
    assert min(outcomes.values()) > 200, outcomes


def _mixed_rows() -> list:
    orphan = _generic(5)
    orphan["messages"][2]["tool_call_id"] = "nope"  # a result answering no call: schema-valid, refused
    empty = _generic(6, messages=[{"role": "system", "content": "s"}, {"role": "assistant", "content": "  "}])
    return [_generic(0), "{not json", _generic(1, reward=None), _generic(2, reward=0.5), orphan, empty,
            _generic(3, label=1, reward=0.0), {"id": "t9", "task_id": "x", "messages": []}, _generic(1),
            json.dumps(_generic(4, reward=float("nan"))), _generic(7, reward=None, label=0), "[1, 2]",
            _generic(8, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                  {"role": "assistant", "content": None, "action": "search[x]"},
                                  {"role": "user", "content": "Error: nothing", "observation": True}])]


def _stats_via(args, counts: bool) -> dict:
    data = stream_data(args, counts=counts)
    seen = [(t.id, t.task_id, t.domain, t.agent, t.label, t.reward, t.n_tool_errors, t.hidden.get("label_rule"),
             t.hidden.get("label_source")) for t in data.trajectories]
    return {"seen": seen, "report": data.report, "tally": data.to_dict(),
            "join": data.join.to_dict() if data.join else None}


def test_stats_on_mixed_and_bad_input_matches_the_full_loader(tmp_path, capsys):
    """User sees: on a file of good, malformed, schema-violating, orphan-result, empty, duplicate,
    unlabeled, graded and labeled records, `stats --skip-bad` counts and lists exactly what the full
    loader keeps and skips (with a labels file joined too); without --skip-bad both stop at the same
    record with the same error."""
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in _mixed_rows()))
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\nt1,1\nt2,0\nt404,1\n")
    for extra in ({}, {"labels": str(labels)}, {"label_threshold": ">=1"}):
        args = argparse.Namespace(data=[str(data)], format="auto", label_threshold=None, labels=None, skip_bad=True)
        vars(args).update(extra)
        full, counted = _stats_via(args, counts=False), _stats_via(args, counts=True)
        assert counted == full
        assert len(full["report"].skipped) == 7 and len(full["seen"]) == 6
        args.skip_bad = False
        errors = []
        for counts in (False, True):
            with pytest.raises(TrajectoryFormatError) as error:
                _stats_via(args, counts)
            errors.append((error.value.file, error.value.record, error.value.problem))
        assert errors[0] == errors[1] and errors[0][1] == 1
    capsys.readouterr()
    assert main(["stats", "--json", "--skip-bad", "--data", str(data)]) == 0
    stats = json.loads(capsys.readouterr().out)
    loaded = load_trajectories(data, on_error="skip")
    assert stats["trajectories"] == len(loaded) == 6 and stats["skipped"] == len(loaded.report.skipped) == 7
    assert stats["tool_errors"] == sum(t.n_tool_errors for t in loaded) == 2
    assert stats["unlabeled"] == 1 and stats["warnings"]  # t2's graded 0.5 labeled by reward > 0 is warned about
