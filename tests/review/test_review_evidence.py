"""The item page says what the judge read, from the verdict line's ``evidence`` ("read 16 of 103 steps; 87
elided"), and says the evidence is unknown for a line without it (issue 40 item 1)."""

from __future__ import annotations

import html
import json
import re

import httpx

from rubricforge_dspy.core.verdict import EvidenceRecord
from rubricforge_dspy.review import ReviewInputs
from tests.review.conftest import DEMO_DATA, DEMO_VERDICTS, start


def test_each_item_page_shows_the_evidence_its_line_records(tmp_path):
    lines = [json.loads(x) for x in DEMO_VERDICTS.read_text().splitlines() if x.strip()][:3]
    cut = EvidenceRecord(steps=lines[0]["n_steps"], whole=14, clipped=2, elided=lines[0]["n_steps"] - 16,
                         chars_cut=9_000, complete=False)
    lines[0]["evidence"] = cut.to_dict()
    lines[1]["evidence"] = EvidenceRecord.whole_episode(lines[1]["n_steps"]).to_dict()
    lines[2].pop("evidence", None)
    verdicts = tmp_path / "v.jsonl"
    verdicts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = start(ReviewInputs(data=[DEMO_DATA], verdicts=verdicts, labels_out=tmp_path / "labels.jsonl",
                                labeler="t"))
    said = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as client:
            client.get(f"/?token={server.token}")
            for index in range(len(server.state.verdicts)):
                page = client.get(f"/item/{index}").text
                said[server.state.verdicts.ids[index]] = html.unescape(
                    re.search(r'<p class="note" id="evidence-read">(.*?)</p>', page, re.S)[1])
    finally:
        server.stop()
    assert said[lines[0]["id"]] == f"Evidence: read 16 of {cut.steps} steps; {cut.elided} elided, 2 clipped, " \
                                   "9,000 characters cut."
    assert said[lines[1]["id"]] == f"Evidence: read all {lines[1]['n_steps']} steps."
    assert "evidence unknown" in said[lines[2]["id"]]
