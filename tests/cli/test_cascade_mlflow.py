"""`judge --cascade --from-mlflow ... --to-mlflow ...` on a real MLflow store (SQLite, in process): the verdicts are
written back, and the escalated traces are tagged for a person to label there."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("mlflow", reason="the MLflow flags need the extra: pip install -e '.[mlflow]'")

import mlflow  # noqa: E402

from rubricforge_dspy.judge.cascade import Cascade, StageRule  # noqa: E402
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor  # noqa: E402
from tests.support.helpers import REPO  # noqa: E402
from tests.support.hybrid import dataset  # noqa: E402


def test_judge_cascade_to_mlflow_tags_the_escalated_traces_for_labeling(store, tmp_path):
    uri, ids = store
    cascade = tmp_path / "cascade.json"
    floor = FloorJudge(SymptomFloor.fit(dataset(40)))
    Cascade([floor], [StageRule("floor", math.inf, -1e-9)]).save(cascade)  # decides nothing: all to a person
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = tmp_path / "v.jsonl"
    done = subprocess.run([sys.executable, "-m", "rubricforge_dspy", "judge", "--cascade", str(cascade),
                           "--from-mlflow", uri, "--experiment", "cli", "--to-mlflow", uri, "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "went to a person" in done.stderr and "tagged 3 escalated trace(s)" in done.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["stage"] for x in lines] == ["escalated"] * 3
    ranks = {i: mlflow.get_trace(i).info.tags.get("rubricforge.label_next") for i in ids}
    assert sorted(ranks.values()) == ["1", "2", "3"]
    errors = [[a.error.error_code for a in mlflow.get_trace(i).info.assessments if a.name == "rubricforge" and a.error]
              for i in ids]
    assert errors == [["ESCALATED"]] * 3  # written back as abstentions, never as fails
