"""Fixtures of the review tests: a review of the bundled demo run, served for real by uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_DATA = ROOT / "rubricforge_dspy" / "pipeline" / "demo-gpt-4o-airline.json"
DEMO_RUN = ROOT / "artifacts" / "demo"
DEMO_VERDICTS = DEMO_RUN / "predictions" / "induced.jsonl"
DEMO_PROGRAM = DEMO_RUN / "induced.json"

pytest.importorskip("starlette", reason="the review page needs starlette (pip install starlette jinja2 uvicorn)")
pytest.importorskip("uvicorn", reason="the review page needs uvicorn")


@pytest.fixture
def demo_inputs(tmp_path):
    from rubricforge_dspy.review import ReviewInputs

    return ReviewInputs(data=[DEMO_DATA], verdicts=DEMO_VERDICTS, labels_out=tmp_path / "labels.jsonl",
                        labeler="tester", program=DEMO_PROGRAM, run_dir=DEMO_RUN,
                        allow_unverified_program=True)  # the demo's program predates program hashes


def start(inputs):
    """A `ReviewServer` on 127.0.0.1 (a free port) serving `inputs`, once it accepts connections."""
    from rubricforge_dspy.review import ReviewServer, ReviewState

    server = ReviewServer(ReviewState(inputs))
    server.start()  # returns when uvicorn has started (an event set by its startup), not after a sleep
    return server


@pytest.fixture
def demo_server(demo_inputs):
    server = start(demo_inputs)
    yield server
    server.stop()


def journal_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
