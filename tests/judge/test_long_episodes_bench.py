"""The long-episode benchmark's accounting (evals/bench_long_episodes.py) on the longest shipped public
coding-agent episode (66-step OpenHands), against the fake OpenAI server on 127.0.0.1: what it reports as
reaching the LM is what the requests held, and it agrees with the render's marker and the judges' own
evidence. Skipped when evals/ is not beside the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EPISODE = ROOT / "evals" / "data" / "openhands" / "multi_swe_bench_output.jsonl"
if not (ROOT / "evals" / "bench_long_episodes.py").exists() or not EPISODE.exists():  # pragma: no cover
    pytest.skip("evals/ is not beside the tests", allow_module_level=True)

from evals import bench_long_episodes as bench  # noqa: E402
from rubricforge_dspy.core.presets import EMBEDDED, SERVER  # noqa: E402
from rubricforge_dspy.data import load_trajectories  # noqa: E402
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory  # noqa: E402
from rubricforge_dspy.judge._reading import QuotedSteps  # noqa: E402


@pytest.fixture(scope="module")
def episode():
    return load_trajectories(EPISODE)[0]


def test_the_renders_elided_count_is_the_steps_missing_from_its_text(episode):
    text = render_trajectory(episode, RenderConfig.of(EMBEDDED))
    quoted = QuotedSteps(episode)
    reach = bench.step_reach(quoted, [text])
    accounting = bench.render_accounting(text, quoted, reach)
    assert accounting["elided"] == reach.count("unseen") > 0 and accounting["elided_equals_unseen"]
    assert reach.count("whole") + reach.count("clipped") + reach.count("unseen") == len(episode.steps)
    whole = render_trajectory(episode, RenderConfig.of(SERVER))  # the server budget fits this episode
    assert bench.step_reach(quoted, [whole]).count("whole") == len(episode.steps)
    assert bench.render_accounting(whole, quoted, ["whole"] * len(episode.steps))["elision_markers"] == 0


@pytest.mark.parametrize("mode", ["segments", "explore"])
def test_what_reaches_the_fake_server_is_what_the_judge_records(episode, mode):
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing.fake_server import FakeOpenAI

    with FakeOpenAI(bench.answer) as server:
        judge = bench.make_judge(mode, "Grade the episode.", RenderConfig.of(EMBEDDED))
        judge.set_lm(make_lm(LMConfig(model=server.model, api_base=server.api_base, num_retries=0, timeout=10)))
        row = bench.judge_one(judge, mode, episode, bench.FakeLog(server))
    assert row["verdict"] != "abstained" and row["evidence_matches_requests"] is True
    assert row["requests"] == row["calls_reported"] > 1
    if mode == "segments":  # every step reaches some request, whole or clipped
        assert row["reach"]["unseen"] == 0 and row["symptom_steps_reaching_lm"] == row["symptom_steps"]
    else:  # the scripted policy reads the first error step the (clipped) symptoms tool names
        assert row["evidence"]["steps_read"] and row["evidence"]["steps_read"][0] in row["symptom_steps"]
        assert row["symptom_notes_reaching_lm"]
