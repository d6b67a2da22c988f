"""A run's output is bound to the cascade that wrote it (issue 42 item 7): an edited cascade, run with the override
on an output another cascade completed, is refused (exit 2) naming both cascade files' digests, never "nothing to
do". Before the fix it said "nothing to do" (exit 0) and left the other cascade's verdicts as this one's."""

from __future__ import annotations

import json

from rubricforge_dspy.cli.main import main
from tests.support.cascade import REWARD_ABOVE_0
from tests.support.recorded import other_tool_verdicts


def test_an_edited_cascade_on_a_complete_output_is_told_the_output_is_another_cascades(halves, tmp_path, capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    other_tool_verdicts(halves / "cal.jsonl", verdicts)
    cascade = tmp_path / "cascade.json"
    assert main(["cascade", "fit", "--stage", str(halves / "floor.json"), "--stage", str(verdicts),
                 "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--alpha", "0.05", "--bound", "pooled",
                 "--method", "holm", "--out", str(cascade)]) == 0
    out = tmp_path / "v.jsonl"
    run = ["judge", "--cascade", str(cascade), "--data", str(halves / "cal.jsonl"), *REWARD_ABOVE_0, "--out", str(out)]
    assert main(run) == 0
    assert main(run) == 0  # the same cascade again: its own output, complete
    before = out.read_bytes()
    capsys.readouterr()
    document = json.loads(cascade.read_text())
    document["edited"] = True  # any edit: the file is another cascade (loadable only with the override)
    cascade.write_text(json.dumps(document))
    code = main([*run, "--allow-unverified-program"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "nothing to do" not in err and "not by" in err and str(cascade) in err and "Traceback" not in err
    assert out.read_bytes() == before
