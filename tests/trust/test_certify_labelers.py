"""`certify` with a labels file from two annotators: the human ceiling and the judge beside each labeler
(issue 41 item 2), against the fake OpenAI-compatible server."""

from __future__ import annotations

import json

import numpy as np
from sklearn.metrics import cohen_kappa_score

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.program.store import MANIFEST_KEY, read_program
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from tests.support.certificate import frozen_program, held_out, lenient_verdict


def test_certify_prints_the_judge_beside_each_labeler(tmp_path, capsys):
    path, _ = frozen_program(tmp_path)
    items = held_out()
    data = tmp_path / "held_out.jsonl"
    from tests.support.records import write_labeled_jsonl

    write_labeled_jsonl(data, items)
    # annotator A gives the true outcome; B flips every third item and is unsure on the last one
    rows, truth, flipped = [], {}, {}
    for n, t in enumerate(items):
        truth[t.id] = t.label
        flipped[t.id] = 1 - t.label if n % 3 == 0 else t.label
        rows.append(f"{t.id},A,{'Successful' if t.label else 'Unsuccessful'}\n")
        b = "Unsure" if n == len(items) - 1 else ("Successful" if flipped[t.id] else "Unsuccessful")
        rows.append(f"{t.id},B,{b}\n")
    labels = tmp_path / "annotations.csv"
    labels.write_text("id,annotator,trajectory_success\n" + "".join(rows))
    verdicts = tmp_path / "verdicts.jsonl"
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        assert main(["certify", str(path), "--data", str(data), "--labels", str(labels), "--label-column",
                     "trajectory_success", "--label-values", "Successful=1,Unsuccessful=0,Unsure=skip",
                     "--labeler-column", "annotator", "--resamples", "200", "--verdicts-out", str(verdicts),
                     "--api-base", fake.api_base, "--model", fake.model]) == 0
    out = capsys.readouterr().out
    passed = {r["id"]: int(r["passed"]) for r in map(json.loads, verdicts.read_text().splitlines())}
    ids = [t.id for t in items]
    b_ids = ids[:-1]  # B's last is a skip
    human = np.mean([truth[i] == flipped[i] for i in b_ids])
    with_a = np.mean([passed[i] == truth[i] for i in ids])
    with_b = np.mean([passed[i] == flipped[i] for i in b_ids])
    kappa_b = cohen_kappa_score([passed[i] for i in b_ids], [flipped[i] for i in b_ids])
    assert f"2 labelers agree on {human:.1%}" in out and f"of {len(b_ids)} items labeled at least twice" in out
    assert f"the judge agrees with A on {with_a:.1%}" in out and f"of {len(ids)} (Cohen's kappa" in out
    assert f"the judge agrees with B on {with_b:.1%}" in out and f"Cohen's kappa {kappa_b:.2f}" in out
    stored = read_program(path)[MANIFEST_KEY]["certificate"]["labelers"]
    assert [row["labeler"] for row in stored["judge"]] == ["A", "B"]
    assert stored["humans"]["interval"]["seed"] == 0
