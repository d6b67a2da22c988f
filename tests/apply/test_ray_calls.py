"""`apply.ray.RayCalls` in the one job runner: its workers judge `Trajectory` records, so a plain judge whose items
the checking pass spilled (rendered inputs, `apply.writer.Spilled`) is refused by name before anything reaches Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'rubricforge-dspy[ray]'")

from rubricforge_dspy.apply import ray as ray_backend  # noqa: E402
from rubricforge_dspy.apply.ray import RayCalls  # noqa: E402
from rubricforge_dspy.apply.stream import run_judge_file  # noqa: E402
from rubricforge_dspy.core.errors import InputError  # noqa: E402
from rubricforge_dspy.core.verdict import read_verdicts  # noqa: E402
from rubricforge_dspy.lm.config import LMConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


def test_ray_calls_refuse_a_plain_judges_spilled_items_by_name(tmp_path, monkeypatch):
    def reached_ray(trajectories):
        raise AssertionError(f"spilled items reached Ray: {[type(t).__name__ for t in trajectories][:1]}")

    monkeypatch.setattr(ray_backend, "trajectory_dataset", reached_ray)
    config = LMConfig(model="m@r", api_base="http://127.0.0.1:9/v1")
    out = tmp_path / "v.jsonl"
    with pytest.raises(InputError, match=r"RayCalls.*plain judge.*cascade"):
        run_judge_file(None, AIRLINE, out, lm=config, calls=RayCalls(config), limit=2, cache=False, progress=False)
    assert not out.exists() or read_verdicts(out) == {}  # nothing judged, nothing written
