"""The command line's MLflow flags (cli/integrations.py) on a real MLflow store (SQLite, in process), and
``rubricforge judge --from-mlflow ... --to-mlflow ...`` end to end once cli/main.py wires the flags."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mlflow", reason="the MLflow flags need the extra: pip install -e '.[mlflow]'")

import mlflow  # noqa: E402

from rubricforge_dspy.cli.integrations import (add_mlflow_sink_arguments, add_mlflow_source_arguments,  # noqa: E402
                                               from_mlflow_requested, load_from_mlflow, write_verdicts_to_mlflow)
from rubricforge_dspy.core.errors import InputError  # noqa: E402
from rubricforge_dspy.judge.module import TrajectoryJudge  # noqa: E402
from rubricforge_dspy.program.store import freeze  # noqa: E402
from tests.helpers import REPO  # noqa: E402
from tests.test_integrations_mlflow import human, local_store, run_agent  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--data", nargs="+")
    p.add_argument("--skip-bad", action="store_true")
    add_mlflow_source_arguments(p)
    add_mlflow_sink_arguments(p)
    return p


@pytest.fixture
def store(tmp_path):
    uri = local_store(tmp_path, "cli")
    ids = [run_agent(task, fail=task == 1) for task in range(3)]
    mlflow.flush_trace_async_logging()
    human(ids[0], True)
    human(ids[1], "fail")
    return uri, ids


def test_flags_are_checked_before_anything_is_read():
    with pytest.raises(InputError, match="--experiment"):
        from_mlflow_requested(parser().parse_args(["--from-mlflow", "http://127.0.0.1:1"]))
    with pytest.raises(InputError, match="not both"):
        from_mlflow_requested(parser().parse_args(["--from-mlflow", "u", "--experiment", "e", "--data", "x.jsonl"]))
    with pytest.raises(InputError, match="go with --from-mlflow"):
        from_mlflow_requested(parser().parse_args(["--experiment", "e"]))
    assert not from_mlflow_requested(parser().parse_args(["--data", "x.jsonl"]))


def test_from_mlflow_loads_labels_and_counts_unlabeled(store, capsys):
    uri, ids = store
    got = load_from_mlflow(parser().parse_args(["--from-mlflow", uri, "--experiment", "cli", "--mlflow-page-size", "2"]))
    assert [t.id for t in got] == ids
    assert [t.label for t in got[:2]] == [1, 0] and got[2].label is None
    assert "2 labeled, 1 unlabeled" in capsys.readouterr().err
    with pytest.raises(InputError, match="no such experiment"):
        load_from_mlflow(parser().parse_args(["--from-mlflow", uri, "--experiment", "nope"]))


def test_to_mlflow_writes_the_verdict_file_back(store, tmp_path):
    uri, ids = store
    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program, lm="m")
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": i, "passed": k != 1, "score": 0.2 if k == 1 else 0.8,
                                            "abstained": False, "reason": "r", "model": "m"}) + "\n"
                                for k, i in enumerate(ids)))
    args = parser().parse_args(["--to-mlflow", uri, "--assessment-name", "rf"])
    first = write_verdicts_to_mlflow(args, verdicts, program)
    second = write_verdicts_to_mlflow(args, verdicts, program)
    assert (first.logged, second.unchanged) == (3, 3)
    values = [[a.feedback.value for a in mlflow.get_trace(i).info.assessments if a.name == "rf"] for i in ids]
    assert values == [[True], [False], [True]]


def test_judge_from_and_to_mlflow_end_to_end(store, tmp_path):
    """`rubricforge judge --from-mlflow ... --to-mlflow ...`: traces in, one assessment per trace out."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text

    uri, ids = store
    program = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), program, lm="fake-judge")

    def responder(body, n):
        failed = "(ERROR)" in user_text(body)
        return {"reason": "tool error" if failed else "ok", "passed": not failed, "score": 0.1 if failed else 0.9}

    with FakeOpenAI(responder=responder) as fake:
        done = subprocess.run([sys.executable, "-m", "rubricforge_dspy", "judge", "--program", str(program),
                               "--from-mlflow", uri, "--experiment", "cli", "--to-mlflow", uri,
                               "--out", str(tmp_path / "v.jsonl"), "--model", fake.model, "--api-base", fake.api_base],
                              capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    values = [[a.feedback.value for a in mlflow.get_trace(i).info.assessments if a.name == "rubricforge"] for i in ids]
    assert values == [[True], [False], [True]]


def test_label_next_from_mlflow_tags_its_picks_there(store, tmp_path):
    """`label-next --from-mlflow` ranks the experiment's traces and tags the picks in MLflow, so a person labels
    them in the UI; nothing is judged here (the ranking comes from a verdict file), so no LM is needed."""
    uri, ids = store
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": i, "passed": True, "score": s, "abstained": False, "reason": "r",
                                            "model": "m"}) + "\n" for i, s in zip(ids, (0.9, 0.52, 0.48))))
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = tmp_path / "to_label.jsonl"
    done = subprocess.run([sys.executable, "-m", "rubricforge_dspy", "label-next", "--from-mlflow", uri,
                           "--experiment", "cli", "--verdicts", str(verdicts), "-k", "2", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    picked = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert len(picked) == 2 and set(picked) <= set(ids)
    tags = {i: mlflow.get_trace(i).info.tags for i in ids}
    ranks = {i: tags[i].get("rubricforge.label_next") for i in ids}
    assert [ranks[i] for i in picked] == ["1", "2"], ranks
    assert sum(r is not None for r in ranks.values()) == 2
    assert (tmp_path / "to_label.jsonl.from-mlflow.jsonl").is_file()  # what was ranked, kept beside the output
    again = subprocess.run([sys.executable, "-m", "rubricforge_dspy", "label-next", "--experiment", "cli",
                            "--verdicts", str(verdicts), "--out", str(tmp_path / "x.jsonl")],
                           capture_output=True, text=True, env=env, cwd=REPO)
    assert again.returncode == 2 and "--from-mlflow" in again.stderr
