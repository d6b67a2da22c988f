"""The sealed documents of the segments and explorer judges in `program.store`: their manifest is read and updated like
a program's (`read_manifest`, `update_manifest`), the file stays loadable, and an edited one is refused."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.program.store import ProgramError, freeze, read_manifest, update_manifest


@pytest.mark.parametrize("make", [lambda: SegmentsJudge("rubric S", render_config=RenderConfig(max_tokens=800)),
                                  lambda: ExplorerJudge("rubric E", max_iters=4)], ids=["segments", "explorer"])
def test_a_reading_judge_is_saved_with_a_manifest_that_update_manifest_extends(make, tmp_path):
    judge = make()
    path = tmp_path / "reader.json"
    judge.save(path)
    manifest = read_manifest(path)
    assert manifest["rubric"] == judge.rubric and manifest["rubric_sha256"] == judge.rubric_sha256
    assert manifest["read"] == judge.read_mode and manifest["reading"] == judge.reading_settings()
    out = tmp_path / "out" / "reader.json"
    written = update_manifest(path, {"note": {"k": 1}}, out_path=out)
    assert written == {**manifest, "note": {"k": 1}} == read_manifest(out)
    assert "note" not in read_manifest(path)  # out_path: the source is unchanged
    loaded = load_judge(out, check_certificate=False)
    assert type(loaded) is type(judge) and loaded.manifest["note"] == {"k": 1} and loaded.rubric == judge.rubric
    data = json.loads(out.read_text())
    data["manifest"]["note"] = {"k": 2}  # edited by hand: the sha256 no longer matches
    out.write_text(json.dumps(data))
    for read in (read_manifest, lambda p: update_manifest(p, {"x": 1})):
        with pytest.raises(ProgramError, match="edited after it was saved"):
            read(out)


def test_a_changed_rubric_is_recorded_in_the_manifest_on_save(tmp_path):
    judge = SegmentsJudge("first")
    judge.save(tmp_path / "a.json")
    judge.verdict.signature = judge.verdict.signature.with_instructions("second")  # as GEPA may evolve it
    judge.save(tmp_path / "b.json")
    assert read_manifest(tmp_path / "b.json")["rubric_sha256"] == judge.rubric_sha256 != \
        read_manifest(tmp_path / "a.json")["rubric_sha256"]
    assert read_manifest(tmp_path / "b.json")["rubric"] == "second"


def test_read_manifest_of_a_program_is_its_manifest(tmp_path):
    path = tmp_path / "p.json"
    freeze(TrajectoryJudge(), path, lm="scripted")
    assert read_manifest(path)["induced_with_lm"] == "scripted"
