"""A refused run leaves nothing behind (issue 42 item 7): a `judge` whose data is refused (exit 2, no LM request)
on a new output removes the output it created and every side file it made beside it. Before the fix the
output was removed but its done index ``OUT.ids`` stayed."""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.testing.fake_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "artifacts" / "demo" / "induced.json"
DATA = ROOT / "rubricforge_dspy" / "pipeline" / "demo-gpt-4o-airline.json"


def test_a_refused_run_leaves_no_side_file(tmp_path, capsys):
    bad = tmp_path / "in" / "bad.jsonl"
    bad.parent.mkdir()
    records = json.loads(DATA.read_text())[:5]
    bad.write_text("\n".join(json.dumps(r) for r in records) + "\n{\"no\": \"id\"}\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "other.jsonl.ids").write_text("not ours\n")  # a file beside it that the run did not make
    with FakeOpenAI() as fake:
        code = main(["judge", "--program", str(PROGRAM), "--allow-unverified-program", "--data", str(bad),
                     "--format", "jsonl", "--out", str(out_dir / "out.jsonl"), "--api-base", fake.url + "/v1",
                     "--model", "fake-judge"])
        assert fake.n_requests == 0
    err = capsys.readouterr().err
    assert code == 2 and str(bad) in err
    assert sorted(p.name for p in out_dir.iterdir()) == ["other.jsonl.ids"]
