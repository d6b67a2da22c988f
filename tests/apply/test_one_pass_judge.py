"""`run_judge_file` (the API of `rubricforge judge`) reads its input once: the whole-input check before the
first LM call also joins the labels, tallies, and renders each trajectory into a spill file that the judging
pass reads; a judge whose inputs are not plain data (a `FloorJudge`) reads the input a second time, with the
labels joined once and reported once."""

from __future__ import annotations

import pytest

import rubricforge_dspy.data.formats as formats
import rubricforge_dspy.data.scan as scan
from rubricforge_dspy.apply.stream import run_judge_file
from rubricforge_dspy.data.labels import LabelJoin
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.batch import assert_one_line_per_id, by_text, fake_lm, read_lines, write_generic_jsonl
from tests.support.hybrid import dataset


def counting(monkeypatch) -> list[str]:
    """Every trajectory id the loaders yield, whichever pass reads them."""
    read = []
    original = formats.iter_trajectories

    def iter_trajectories(*args, **kwargs):
        for trajectory in original(*args, **kwargs):
            read.append(trajectory.id)
            yield trajectory

    monkeypatch.setattr(formats, "iter_trajectories", iter_trajectories)
    monkeypatch.setattr(scan, "iter_trajectories", iter_trajectories)
    return read


def labels_file(path, ids) -> LabelJoin:
    path.write_text("id,label\n" + "".join(f"{ident},{i % 3 == 0:d}\n" for i, ident in enumerate(ids)))
    return LabelJoin(path)


def test_the_input_is_read_once_and_the_judge_sees_each_render(tmp_path, monkeypatch):
    data = tmp_path / "data.jsonl"
    ids = write_generic_jsonl(data, 12)
    out = tmp_path / "v.jsonl"
    stale = tmp_path / ".v.jsonl.killed-run.spill"
    stale.write_text("left by a killed run\n")
    join = labels_file(tmp_path / "labels.csv", ids)
    tallied = []
    read = counting(monkeypatch)
    judge = TrajectoryJudge(render_config=RenderConfig(max_tokens=2000))
    with FakeOpenAI(by_text) as fake:
        summary = run_judge_file(judge, data, out, lm=fake_lm(fake), concurrency=4, cache=False, progress=False,
                                 labels=join, on_trajectory=lambda t: tallied.append(t.id))
        sent = sorted(user_text(r["body"]) for r in fake.requests)
        # A resumed run with a limit: every id is done, nothing is rendered or asked again.
        first = list(read)
        read.clear()
        again = run_judge_file(judge, data, out, lm=fake_lm(fake), limit=6, cache=False, progress=False,
                               labels=tmp_path / "labels.csv")
        assert fake.n_requests == 12
    assert (again.judged, again.resumed) == (0, 6) and read == ids  # the check still reads the whole input
    read[:] = first
    assert summary.fast_path and summary.judged == 12
    assert read == ids  # one pass over the input
    assert tallied == ids
    lines = assert_one_line_per_id(out, ids)
    assert {line["id"]: line["label"] for line in lines} == {ident: int(i % 3 == 0) for i, ident in enumerate(ids)}
    assert join.finish().matched == 12
    rendered = {t.id: judge.render(t) for t in formats.load_trajectories(data)}
    assert all(any(text in body for body in sent) for text in rendered.values())  # the spilled renders were sent
    assert not list(tmp_path.glob("*.spill")) and not list(tmp_path.glob(".*.spill"))  # the stale one too


def test_a_judge_whose_inputs_are_not_plain_data_reads_the_input_again(tmp_path, monkeypatch):
    """A `FloorJudge` reads the `Trajectory` itself: it cannot be spilled, so the judging pass reads the
    input again; the labels are joined for both passes but reported (and tallied) once."""
    train = dataset(40)
    floor = FloorJudge(SymptomFloor.fit(train))
    data = tmp_path / "data.jsonl"
    ids = write_generic_jsonl(data, 8)
    join = labels_file(tmp_path / "labels.csv", ids)
    tallied = []
    read = counting(monkeypatch)
    summary = run_judge_file(floor, data, tmp_path / "v.jsonl", progress=False, cache=False, labels=join,
                             on_trajectory=lambda t: tallied.append(t.id))
    assert summary.judged == 8 and not summary.fast_path
    assert read == ids + ids and tallied == ids
    report = join.finish()
    assert (report.matched, report.without_trajectory) == (8, [])
    lines = read_lines(tmp_path / "v.jsonl")
    assert {line["id"]: line["label"] for line in lines} == {ident: int(i % 3 == 0) for i, ident in enumerate(ids)}
    assert not list(tmp_path.glob(".*.spill"))


def test_a_bad_record_is_refused_before_any_call_and_leaves_no_spill(tmp_path):
    data = tmp_path / "data.jsonl"
    write_generic_jsonl(data, 6, bad_line=True)
    with FakeOpenAI(by_text) as fake:
        with pytest.raises(Exception, match="data.jsonl"):
            run_judge_file(TrajectoryJudge(), data, tmp_path / "v.jsonl", lm=fake_lm(fake), progress=False)
        assert fake.n_requests == 0
    assert not list(tmp_path.glob(".*.spill")) and not (tmp_path / "v.jsonl").exists()


@pytest.mark.slow
def test_the_judge_command_imports_neither_scipy_nor_scikit_learn(tmp_path):
    """`rubricforge judge` pays for DSPy but not for the statistics stack (about 1 s of start-up CPU): scipy
    and scikit-learn load only where a statistic or a calibration is computed."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    data = tmp_path / "in.jsonl"
    write_generic_jsonl(data, 3)
    out = tmp_path / "verdicts.jsonl"
    with FakeOpenAI() as server:
        code = ("import sys; from rubricforge_dspy.cli.main import main; "
                f"rc = main(['judge', '--data', {str(data)!r}, '--out', {str(out)!r}, '--api-base', "
                f"{server.api_base!r}, '--model', {server.model!r}, '--no-cache']); "
                "heavy = sorted(m for m in ('sklearn', 'scipy', 'pandas') if m in sys.modules); "
                "print('HEAVY', heavy, rc, file=sys.stderr)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)}, timeout=180)
        assert server.n_requests == 3
    assert "HEAVY [] 0" in done.stderr, done.stderr[-2000:]
    assert len(read_lines(out)) == 3
