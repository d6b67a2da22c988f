"""What the judge read, when the page cannot know it or is given another program: said on the page in words,
with what is shown instead (over real HTTP on runs made with `rubricforge judge`; the browser test
`test_what_the_judge_read_equals_rubricforge_render_with_the_judging_programs_preset` checks the text itself)."""

from __future__ import annotations

import html
import re

import httpx

from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.review import ReviewInputs
from tests.review.conftest import DEMO_DATA, DEMO_VERDICTS, start
from tests.support.review_runs import PROGRAM, data_index, judge, rendered


def _items(server) -> list[dict]:
    """Each item page's evidence text, render source and warning (None when there is none)."""
    out = []
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as c:
        c.get(f"/?token={server.token}")
        for index in range(len(server.state.verdicts)):
            page = c.get(f"/item/{index}").text
            evidence = re.search(r'<pre id="evidence"[^>]*>(.*?)</pre>', page, re.S)[1]
            warning = re.search(r'<p class="warn" id="render-warning"[^>]*>(.*?)</p>', page, re.S)
            source = re.search(r'<p class="note" id="render-source">(.*?)</p>', page, re.S)[1]
            out.append({"id": server.state.verdicts.ids[index],
                        "evidence": html.unescape(re.sub(r"</?span[^>]*>", "", evidence)),
                        "source": html.unescape(re.sub(r"<[^>]+>", "", source)),
                        "warning": html.unescape(warning[1]) if warning else None})
    return out


def _serve(tmp_path, verdicts, program=None, data=DEMO_DATA, **more):
    return start(ReviewInputs(data=[data], verdicts=verdicts, labels_out=tmp_path / "labels.jsonl", labeler="t",
                              program=program, **more))


def test_without_a_program_or_a_record_the_page_says_the_judges_text_is_not_known(tmp_path):
    """The README's own command (`review --data D --verdicts V`, no --program) on the demo's verdicts, which no
    OUT.job.json records: the page shows the default render and says, on every item, that it may not be what
    the judge read and what to give to see it."""
    server = _serve(tmp_path, DEMO_VERDICTS, run_dir=None)
    try:
        items = _items(server)
    finally:
        server.stop()
    assert items
    for item in items:
        assert item["warning"] is not None and "the text the judge read is not known" in item["warning"]
        assert "no --program was given" in item["warning"] and "give --program" in item["warning"]
        assert "Shown instead: the trajectory under the default render (22000 tokens, 6000 step chars)" \
            in item["warning"]


def test_a_program_other_than_the_one_that_judged_is_said_and_the_recorded_render_shown(tmp_path):
    """A run judged with PROGRAM (its render recorded in OUT.job.json), reviewed with another --program: every
    item says the --program is not the judge that wrote it, naming what differs, and shows the recorded render
    (`rubricforge render --program PROGRAM`), not the other program's."""
    verdicts = judge(tmp_path / "v.jsonl", "--program", str(PROGRAM), limit=3)
    other = tmp_path / "other.json"
    freeze(TrajectoryJudge(render_config=RenderConfig(max_tokens=700, max_step_chars=120)), other)
    where = data_index()
    server = _serve(tmp_path, verdicts, program=other)
    try:
        items = _items(server)
    finally:
        server.stop()
    for item in items:
        assert item["evidence"] == rendered(where[item["id"]], "--program", str(PROGRAM))
        assert f"--program {other} is not the judge that wrote this verdict" in item["warning"]
        assert "differs from the recorded judge in programs, render" in item["warning"]
        assert "recorded with this verdict's judge fingerprint in v.jsonl.job.json (900 tokens, 700 step chars)" \
            in item["source"]


def test_without_the_record_another_program_is_said_from_the_lines_program_hash(tmp_path):
    """The same run without its OUT.job.json: the verdict lines still name the program that judged
    (``program_sha256``); another --program is said not to be it, and its render is what is shown."""
    verdicts = judge(tmp_path / "v.jsonl", "--program", str(PROGRAM), limit=2)
    (tmp_path / "v.jsonl.job.json").unlink()
    other = tmp_path / "other.json"
    freeze(TrajectoryJudge(render_config=RenderConfig(max_tokens=700, max_step_chars=120)), other)
    server = _serve(tmp_path, verdicts, program=other)
    try:
        items = _items(server)
    finally:
        server.stop()
    where = data_index()
    for item in items:
        assert f"--program {other} is not the program that judged this item" in item["warning"]
        assert "shown with the --program's render" in item["warning"]
        assert item["evidence"] == rendered(where[item["id"]], "--program", str(other))
    server = _serve(tmp_path, verdicts, program=PROGRAM)  # the program that judged: its render, no warning
    try:
        items = _items(server)
    finally:
        server.stop()
    for item in items:
        assert item["warning"] is None and item["evidence"] == rendered(where[item["id"]], "--program", str(PROGRAM))


def test_an_unreadable_judge_record_is_said_and_the_program_used(tmp_path):
    verdicts = judge(tmp_path / "v.jsonl", "--program", str(PROGRAM), limit=1)
    (tmp_path / "v.jsonl.job.json").write_text("{not json")
    server = _serve(tmp_path, verdicts, program=PROGRAM)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as c:
            c.get(f"/?token={server.token}")
            page = html.unescape(c.get("/judge").text)
        item = _items(server)[0]
    finally:
        server.stop()
    assert "v.jsonl.job.json: not a readable judge record" in page
    assert item["warning"] is None and f"the render of --program {PROGRAM}" in item["source"]
