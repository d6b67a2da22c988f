"""`certify`, its recheck, `gate` and `show` on the long-episode judges (a saved `SegmentsJudge` and `ExplorerJudge`):
the certificate goes into the judge's own file and records how it read and the evidence its verdicts rested on, and a
loaded certified reading judge warns, as a program does, when it runs on another LM. Offline with a scripted LM, and
through the command line against the fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import warnings

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.explorer import ExplorerJudge
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.segments import SegmentsJudge
from rubricforge_dspy.program.drift import UncertifiedJudgeWarning
from rubricforge_dspy.program.store import data_fingerprint, data_ids
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from rubricforge_dspy.testing.scripted import ScriptedLM, system_text
from rubricforge_dspy.trust.certificate import CERTIFICATE_KEY, EvidenceMismatchWarning
from rubricforge_dspy.trust.certify import certify_program, recheck_program
from tests.support.certify_data import held_out
from tests.support.helpers import make_dataset
from tests.support.records import write_labeled_jsonl

BUDGET = RenderConfig(max_tokens=1500)
ERROR = "payment method not found"  # the tool error of every failed item of `make_dataset`


def reader_answer(system: str, text: str) -> dict:
    """A reading judge that finds the tool error: a window reader notes it, the segments verdict fails on a note;
    the explorer searches for it, then fails when a step holds it."""
    if "overview" in system:  # the segments verdict
        failed = "tool error at" in text
        return {"passed": not failed, "score": 0.1 if failed else 0.9, "reason": "[2] " + ("error" if failed else "ok")}
    if "excerpt" in system:  # a segments window
        return {"findings": "tool error at [2]" if ERROR in text else "none"}
    if "(nothing yet)" in text:  # the explorer's first call
        return {"action": "search", "argument": ERROR, "passed": False, "score": 0.0, "reason": ""}
    failed = "no step holds that text" not in text
    return {"action": "verdict", "argument": "", "passed": not failed, "score": 0.1 if failed else 0.9,
            "reason": "searched the steps"}


def scripted(model: str = "scripted-reader") -> ScriptedLM:
    def respond(messages):
        return reader_answer(system_text(messages), "\n".join(str(m.get("content") or "") for m in messages))

    return ScriptedLM(respond, model=model)


def saved(kind: str, tmp_path, manifest: bool = True):
    """A reading judge saved as the tests save them (`judge.save`); with `manifest`, one that records the data it
    was trained on (as `induce` does), so that certify can check the held-out data is not it."""
    judge = SegmentsJudge(render_config=BUDGET) if kind == "segments" else ExplorerJudge(render_config=BUDGET)
    if manifest:
        train = make_dataset(8)  # tasks t0..t7; held_out() is t8..t23
        judge.manifest = {**judge.base_manifest(), "data_fingerprint": data_fingerprint(train),
                          "data_seen": data_ids(train)}
    path = tmp_path / f"{kind}.json"
    judge.save(path)
    return path


READ = {"segments": {"mode": "segments", "overlap": 1, "render_tokens": 1500},
        "explore": {"mode": "explore", "max_iters": 16, "max_prompt_tokens": 24000, "render_tokens": 1500}}


@pytest.mark.parametrize("kind", ["segments", "explore"])
def test_certify_and_recheck_a_reading_judge_offline(kind, tmp_path):
    path = saved(kind, tmp_path)
    items = held_out()
    lm = scripted()
    certificate = certify_program(path, items, lm=lm, resamples=200, where="held-out", concurrency=1)
    assert certificate["read"] == READ[kind]
    assert certificate["n"] == len(items) and certificate["false_pass"]["rate"] == 0.0  # the reader finds the error
    assert certificate["accuracy"]["value"] == 1.0 and certificate["abstention"]["k"] == 0
    # what its verdicts read: the segments judge every step whole, the explorer only its search's hits
    complete = len(items) if kind == "segments" else 0
    assert certificate["evidence"] == {"complete": complete, "cut": len(items) - complete, "unknown": 0,
                                       "cut_share": 0.0 if kind == "segments" else 1.0}
    loaded = load_judge(path)
    assert type(loaded).read_mode == kind and loaded.manifest[CERTIFICATE_KEY] == certificate
    assert loaded.manifest["data_seen"]["tasks"] and loaded.manifest["read"] == kind  # the manifest is kept
    result = recheck_program(path, items, lm=lm, concurrency=1)
    assert result.n == 8 and result.k == 0 and not result.worse


@pytest.mark.parametrize("kind", ["segments", "explore"])
def test_a_certified_reading_judge_warns_on_another_lm_only(kind, tmp_path):
    path = saved(kind, tmp_path)
    certify_program(path, held_out(), lm=scripted(), resamples=100, concurrency=1)
    episode = held_out()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)  # the certified LM: no warning
        load_judge(path, lm=scripted())(trajectory=episode)
    with pytest.warns(UncertifiedJudgeWarning, match="certified with another LM"):
        load_judge(path, lm=scripted("another-model"))(trajectory=episode)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)  # certify loads it without the check
        load_judge(path, lm=scripted("another-model"), check_certificate=False)(trajectory=episode)


def test_an_uncertified_reading_judge_warns_when_it_runs(tmp_path):
    path = saved("segments", tmp_path, manifest=False)
    with pytest.warns(UncertifiedJudgeWarning, match="has no certificate"):
        load_judge(path, lm=scripted())(trajectory=held_out()[0])


def test_a_reading_judge_saved_without_a_data_record_is_certified_with_its_own_manifest(tmp_path):
    path = saved("explore", tmp_path, manifest=False)
    certify_program(path, held_out(), lm=scripted(), resamples=100, concurrency=1)
    manifest = json.loads(path.read_text())["manifest"]
    assert manifest["read"] == "explore" and manifest["rubric_sha256"] == ExplorerJudge().rubric_sha256
    assert manifest[CERTIFICATE_KEY]["rubric_sha256"] == manifest["rubric_sha256"]


def test_certify_refuses_a_reading_judge_on_its_own_training_tasks(tmp_path):
    from rubricforge_dspy.trust.certificate import CertificateError

    path = saved("segments", tmp_path)
    lm = scripted()
    with pytest.raises(CertificateError, match="overlap the program's training"):
        certify_program(path, make_dataset(12), lm=lm, resamples=100)
    assert lm.calls == 0 and CERTIFICATE_KEY not in json.loads(path.read_text())["manifest"]


def server_answer(body, n):
    messages = body["messages"]
    return reader_answer(system_text(messages), "\n".join(str(m.get("content") or "") for m in messages))


@pytest.mark.parametrize("kind", ["segments", "explore"])
def test_cli_certify_recheck_and_show_a_reading_judge_against_the_fake_server(kind, tmp_path, capsys):
    path = saved(kind, tmp_path)
    data = tmp_path / "held_out.jsonl"
    write_labeled_jsonl(data, held_out())
    certified = tmp_path / f"certified-{kind}.json"
    with FakeOpenAI(server_answer) as fake:
        lm = ["--api-base", fake.api_base, "--model", fake.model]
        assert main(["certify", str(path), "--data", str(data), "--resamples", "200", "--out-program", str(certified),
                     *lm]) == 0
        assert fake.n_requests > len(held_out())  # several calls a verdict
        assert main(["certify", str(certified), "--data", str(data), "--recheck", *lm]) == 0
    out = capsys.readouterr().out
    assert f"written to: {certified}" in out and "not significantly higher than certified" in out
    certificate = json.loads(certified.read_text())["manifest"][CERTIFICATE_KEY]
    assert certificate["read"]["mode"] == kind and certificate["false_pass"]["rate"] == 0.0
    assert CERTIFICATE_KEY not in json.loads(path.read_text())["manifest"]  # --out-program: the input is unchanged
    assert main(["show", str(certified)]) == 0
    shown = capsys.readouterr().out
    assert f"reads: {kind}" in shown and "certificate (" in shown and f"read: {kind}" in shown


def test_gate_a_segments_candidate_against_an_explorer_baseline(tmp_path):
    from rubricforge_dspy.trust.gate import gate_programs

    candidate, baseline = saved("segments", tmp_path), saved("explore", tmp_path)
    # the candidate read every step whole, the baseline only what it searched: the gate says they read differently
    with pytest.warns(EvidenceMismatchWarning, match="the candidate's verdicts"):
        result = gate_programs(candidate, baseline, held_out(), lm=scripted(), verdicts_dir=tmp_path / "gate",
                               margin=0.05, alpha=0.05, concurrency=1)
    assert len(result.paired.ids) == len(held_out()) and result.mcnemar_b == result.mcnemar_c == 0
    assert result.floor is not None and result.floor["n"] == len(held_out())  # the candidate's manifest was read
    lines = [json.loads(x) for x in (tmp_path / "gate" / "candidate.jsonl").read_text().splitlines()]
    assert len(lines) == len(held_out()) and all(x["evidence"]["read"] == "segments" for x in lines)


def test_certify_refuses_a_judge_that_calls_no_lm_before_any_call(tmp_path):
    from rubricforge_dspy.judge.floor import FloorJudge, SymptomFloor
    from rubricforge_dspy.trust.certificate import CertificateError

    path = tmp_path / "floor.json"
    FloorJudge(SymptomFloor.fit(make_dataset(12))).save(path)
    lm = scripted()
    with pytest.raises(CertificateError, match="calls no LM"):
        certify_program(path, held_out(), lm=lm, resamples=100)
    assert lm.calls == 0
