"""`floor --judge` as a job (`pipeline.floor_job`): the live judge runs through the resumable, cached job path
(`apply.stream.judge_stream`) into a verdict file beside the floor's output, so a second run (or one after a dead
server stopped the first, exit 3) asks the LM only for the items not in it; the data file is opened once; the
report and the saved hybrid equal what the in-memory batch of the judge gives on the same items. Against the fake
OpenAI server on 127.0.0.1, and offline with a scripted LM."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import dspy
import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.judge_names import FLOOR_FOLDS, FLOOR_RESAMPLES
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.spec import DataSpec
from rubricforge_dspy.evidence.features import FeatureTable
from rubricforge_dspy.judge.hybrid import HybridJudge
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from rubricforge_dspy.trust.floor_cv import floor_report
from rubricforge_dspy.trust.hybrid_cv import fit_hybrid_stack, hybrid_rows
from tests.support.cascade import REWARD_ABOVE_0, lines_of

N = 40  # labeled items of the small set (every webshop item is labeled at reward > 0)


def _answer(text: str) -> dict:
    """A deterministic answer per item (by its text): about half pass, scores spread."""
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    score = (h % 97) / 96
    return {"reason": "Judged by its text.", "passed": score >= 0.5, "score": round(score, 3)}


def _served(body, n):
    return _answer(user_text(body))


@pytest.fixture
def small(halves, tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join((halves / "train.jsonl").read_text().splitlines()[:N]) + "\n")
    return path


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "judge.json"
    freeze(TrajectoryJudge(), path, lm="fake-judge")
    return path


def judge_verdicts_path(save: Path) -> Path:
    """Where the live judge's verdicts go: beside the saved hybrid (`pipeline.floor_job.judge_verdicts_path`)."""
    return save.with_name(save.stem + ".judge-verdicts.jsonl")


def _floor(small, program, fake, *extra, save=None) -> int:
    return main(["floor", "--data", str(small), *REWARD_ABOVE_0, "--judge", str(program), "--json",
                 "--api-base", fake.url + "/v1", "--model", "fake-judge", "--timeout", "5", *extra,
                 *(["--save-floor", str(save)] if save is not None else [])])


def _unique_texts(small) -> dict[str, str]:
    """Each item's instruction (its first step), where it is unique in the set: a request holding it was made for
    that item."""
    text = {t.id: t.steps[0].content.strip() for t in load_trajectories(small, label_threshold=0.0)}
    counts: dict[str, int] = {}
    for value in text.values():
        counts[value] = counts.get(value, 0) + 1
    return {ident: value for ident, value in text.items() if counts[value] == 1}


def _asked(unique, bodies) -> set[str]:
    return {ident for ident, text in unique.items() if any(text in user_text(body) for body in bodies)}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_second_run_asks_the_lm_nothing_and_reports_the_same(small, program, tmp_path, capsys):
    hybrid = tmp_path / "hybrid.json"
    with FakeOpenAI(_served) as fake:
        assert _floor(small, program, fake, save=hybrid) == 0
        assert fake.n_requests == N  # one call per labeled item
        first = json.loads(capsys.readouterr().out)
        saved = hybrid.read_text()
        assert _floor(small, program, fake, save=hybrid) == 0
        assert fake.n_requests == N  # the second run asked nothing: every verdict was in the file
    second = json.loads(capsys.readouterr().out)
    assert second == first and hybrid.read_text() == saved
    verdicts = judge_verdicts_path(hybrid)
    assert verdicts == tmp_path / "hybrid.judge-verdicts.jsonl" and first["judge_verdicts_out"] == str(verdicts)
    lines = lines_of(verdicts)
    assert len(lines) == N and len({x["id"] for x in lines}) == N and not any(x["abstained"] for x in lines)
    assert first["judge"] == {"source": f"the program {program}", "graded": N, "missing": 0, "abstained": 0}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_dead_server_exits_3_keeps_what_was_judged_and_the_rerun_asks_only_for_the_rest(small, program, tmp_path,
                                                                                         capsys):
    hybrid = tmp_path / "hybrid.json"
    answered = 12
    unique = _unique_texts(small)
    with FakeOpenAI(_served, die_after=answered) as fake:  # answers 12 requests, then the server is gone
        assert _floor(small, program, fake, save=hybrid) == 3
        port = fake.port  # the endpoint is part of the job: the server comes back on it
        served = [r["body"] for r in fake.requests if not r["drop"]]
    assert len(served) == answered
    err = capsys.readouterr().err
    assert "JudgeUnavailableError" in err and "Traceback" not in err
    assert not hybrid.exists()  # no hybrid fit on part of the verdicts
    verdicts = judge_verdicts_path(hybrid)
    first = lines_of(verdicts)
    kept = {x["id"] for x in first if not x["abstained"]}
    assert {i for i in kept if i in unique} == _asked(unique, served)  # every answer of the first run is kept
    assert 0 < len(kept) <= answered and all(x["error_kind"] in LM_ERROR_KINDS for x in first if x["abstained"])

    with FakeOpenAI(_served, port=port) as fake:
        assert _floor(small, program, fake, save=hybrid) == 0
        bodies = list(fake.chat_bodies)
    rest = {t.id for t in load_trajectories(small, label_threshold=0.0)} - kept
    assert len(bodies) >= len(rest)  # (a retried transient failure is a second request for the same item)
    assert _asked(unique, bodies) == {i for i in rest if i in unique}  # the rest, and none of the kept items
    final = lines_of(verdicts)
    assert len(final) == N and not any(x["abstained"] for x in final)
    assert {x["id"]: x for x in final if x["id"] in kept} == {x["id"]: x for x in first if x["id"] in kept}
    report = json.loads(capsys.readouterr().out)
    assert report["judge"]["graded"] == N and isinstance(load_judge(hybrid), HybridJudge)


_OPENED: list[str] | None = None
_HOOKED = False


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], (str, Path)):
        _OPENED.append(str(args[0]))


def _opens_of(path: Path, run) -> int:
    """How many times `run()` opens `path` (the interpreter's ``open`` audit event: `open`, `io.open`, `os.open`)."""
    global _OPENED, _HOOKED
    if not _HOOKED:  # an audit hook cannot be removed: installed once, it records only while _OPENED is a list
        sys.addaudithook(_audit)
        _HOOKED = True
    _OPENED = []
    try:
        run()
    finally:
        seen, _OPENED = _OPENED, None
    return sum(Path(p).resolve() == path.resolve() for p in seen)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_data_file_is_opened_once_with_a_live_judge(small, program, tmp_path, capsys):
    with FakeOpenAI(_served) as fake:
        alone = _opens_of(small, lambda: main(["floor", "--data", str(small), *REWARD_ABOVE_0,
                                               "--format", "webshop_react", "--json"]))
        judged = _opens_of(small, lambda: _floor(small, program, fake, "--format", "webshop_react",
                                                 save=tmp_path / "hybrid.json"))
        assert fake.n_requests == N
    capsys.readouterr()
    assert alone == 1 and judged == 1  # the judge reads what the floor's one pass kept


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_live_judge_without_an_output_is_refused_before_any_call(small, program, capsys):
    with FakeOpenAI(_served) as fake:
        assert _floor(small, program, fake) == 2
        assert fake.n_requests == 0
    err = capsys.readouterr().err
    assert "give --save-floor FILE or --out FILE" in err and "Traceback" not in err


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_verdict_file_of_another_model_is_refused(small, program, tmp_path, capsys):
    hybrid = tmp_path / "hybrid.json"
    with FakeOpenAI(_served) as fake:
        assert _floor(small, program, fake, save=hybrid) == 0
        capsys.readouterr()
        assert main(["floor", "--data", str(small), *REWARD_ABOVE_0, "--judge", str(program), "--save-floor",
                     str(hybrid), "--api-base", fake.url + "/v1", "--model", "another-judge"]) == 2
        assert fake.n_requests == N
    err = capsys.readouterr().err
    assert f"{judge_verdicts_path(hybrid)}: belongs to another job" in err and "Traceback" not in err


def _scripted() -> ScriptedLM:
    return ScriptedLM(lambda messages: _answer(last_user_text(messages)))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_job_gives_what_the_in_memory_batch_gives(small, program, tmp_path):
    """Offline: the report's rows and the saved hybrid equal those of the judge's in-memory batch on the same items
    (the path `floor --judge` took before the job path)."""
    from rubricforge_dspy.pipeline.floor_job import FloorOptions, run_floor_job

    spec = DataSpec(paths=(str(small),), label_rule=">0")
    save = tmp_path / "hybrid.json"
    lm = _scripted()
    result = run_floor_job(spec, FloorOptions(judge=str(program), save_floor=str(save)), lm=lm)
    assert result.judge_run is not None and result.judge_run.judged == N and result.judge_run.lm_calls == N

    items = list(load_trajectories(small, label_threshold=0.0))
    table = FeatureTable.build(items)
    judge = load_judge(program)
    with dspy.context(lm=_scripted()):
        judge.set_lm(_scripted())
        verdicts = list(judge.batch(items, 4))
    source = f"the program {program}"
    expected = floor_report(table, n_splits=FLOOR_FOLDS, seed=0, n_resamples=FLOOR_RESAMPLES)
    extra = hybrid_rows(table, verdicts, source, n_splits=FLOOR_FOLDS, seed=0, n_resamples=FLOOR_RESAMPLES)
    report = result.report
    assert report["rows"] == [*expected["rows"], *extra["rows"]]
    assert report["judge"] == extra["judge"] and report["notes"] == [*expected["notes"], *extra["notes"]]
    assert result.hybrid is not None
    assert result.hybrid.stack.to_dict() == fit_hybrid_stack(verdicts, table, source).to_dict()
    assert load_judge(save).stack.to_dict() == result.hybrid.stack.to_dict()

    again = run_floor_job(spec, FloorOptions(judge=str(program), save_floor=str(save)), lm=lm)  # resumed
    assert again.judge_run is not None and again.judge_run.lm_calls == 0 and again.judge_run.resumed == N
    assert again.report == report

    # the verdict cache beside the file answers a run whose verdict file is gone
    out = result.judge_out
    assert out is not None and (out.parent / ".rubricforge_cache").is_dir()
    for side in (out, Path(f"{out}.job.json"), Path(f"{out}.ids")):
        side.unlink(missing_ok=True)
    cached = run_floor_job(spec, FloorOptions(judge=str(program), save_floor=str(save)), lm=lm)
    assert cached.judge_run is not None and cached.judge_run.lm_calls == 0 and cached.judge_run.cached == N
    assert cached.report == report


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_judge_that_produces_no_verdict_exits_3_and_keeps_its_lines(small, program, tmp_path, capsys):
    hybrid = tmp_path / "hybrid.json"
    with FakeOpenAI(lambda body, n: "this is not a verdict") as fake:  # every answer unparsable
        assert _floor(small, program, fake, save=hybrid) == 3
        assert fake.n_requests >= N
    err = capsys.readouterr().err
    assert "no verdict was produced" in err and "Traceback" not in err and not hybrid.exists()
    lines = lines_of(judge_verdicts_path(hybrid))
    assert len(lines) == N and all(x["abstained"] and x["error_kind"] not in LM_ERROR_KINDS for x in lines)
