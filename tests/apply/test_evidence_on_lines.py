"""Every verdict line an LM stage writes says what its judge read (``evidence``: the render's record) and what
it cost (``tokens``: the usage the LM reported for that item); a replay from the verdict cache says nothing was
spent again (issue 40 item 1)."""

from __future__ import annotations

import re

from rubricforge_dspy.apply.stream import run_judge_file
from rubricforge_dspy.core.presets import SERVER
from rubricforge_dspy.core.verdict import EvidenceRecord, read_verdicts
from rubricforge_dspy.evidence.render import ELISION, RenderConfig
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.batch import by_text, fake_lm
from tests.support.long_episodes import write_long_episodes

_ELIDED = re.compile(re.escape(ELISION).replace(r"\{n\}", r"(\d+)"))


def test_a_100_step_line_records_the_elision_the_render_marked(tmp_path):
    data, out = tmp_path / "long.jsonl", tmp_path / "v.jsonl"
    ids = write_long_episodes(data)
    judge = TrajectoryJudge(render_config=RenderConfig.of(SERVER))
    with FakeOpenAI(by_text) as fake:
        summary = run_judge_file(judge, data, out, lm=fake_lm(fake), concurrency=2, cache=False, progress=False)
        sent = [user_text(r["body"]) for r in fake.requests]
    assert summary.judged == len(ids) == len(sent)
    lines = read_verdicts(out)
    for text in sent:  # each request, as the server received it
        marked = sum(int(n) for n in _ELIDED.findall(text))
        ident = next(i for i in ids if f"Fix the failing test in package {i[-1]}." in text)
        evidence = lines[ident]["evidence"]
        assert marked > 0 and evidence["elided"] == marked
        assert evidence["steps"] == lines[ident]["n_steps"] == 100
        assert evidence["whole"] + evidence["clipped"] + evidence["elided"] == 100
        assert evidence["complete"] is False and evidence["read"] == "budget" and evidence["chars_cut"] > 0
        # every numbered step shown is counted as shown, none twice
        shown = set(re.findall(r"^\[(\d+)\] ", text, flags=re.M))
        assert len(shown) == evidence["whole"] + evidence["clipped"]
    for line in lines.values():  # the tokens the fake server reported for that item's one call
        assert line["tokens"]["calls"] == 1 and line["tokens"]["prompt"] > 1000 and line["tokens"]["completion"] > 0
        assert "cached" not in line["tokens"]
    total = sum(line["tokens"]["prompt"] for line in lines.values())
    assert total == fake.usage["prompt_tokens"]


def test_a_short_episode_is_read_whole_and_a_cache_replay_spends_nothing(tmp_path):
    data = tmp_path / "short.jsonl"
    ids = write_long_episodes(data, n_items=3, n_steps=6)
    judge = TrajectoryJudge(render_config=RenderConfig.of(SERVER))
    cache = tmp_path / "cache"
    with FakeOpenAI(by_text) as fake:
        run_judge_file(judge, data, tmp_path / "a.jsonl", lm=fake_lm(fake), concurrency=1, cache=cache,
                       progress=False)
        again = run_judge_file(judge, data, tmp_path / "b.jsonl", lm=fake_lm(fake), concurrency=1, cache=cache,
                               progress=False)
        assert fake.n_requests == len(ids)  # the second run asked nothing
    assert again.cached == len(ids)
    first, replayed = read_verdicts(tmp_path / "a.jsonl"), read_verdicts(tmp_path / "b.jsonl")
    for ident in ids:
        assert EvidenceRecord.from_dict(first[ident]["evidence"]) == EvidenceRecord.whole_episode(6)
        assert replayed[ident]["evidence"] == first[ident]["evidence"]  # what the cached answer was given
        assert replayed[ident]["tokens"] == {"prompt": 0, "completion": 0, "calls": 0, "cached": True}
        assert first[ident]["tokens"]["calls"] == 1 and first[ident]["tokens"]["prompt"] > 0
