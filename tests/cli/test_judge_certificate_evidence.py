"""`judge` with a certified program says, at the end of the run, when the certificate was earned on other evidence
than this run's verdicts were judged on (complete against cut: issue 40 item 1, at judge time as `recheck` and
`gate` already do), and `judge --cascade` says it of each certified stage. Through the command line against the fake
OpenAI-compatible server on 127.0.0.1; the certificates are made offline as tests/trust/test_certify*.py make them."""

from __future__ import annotations

import json

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text
from rubricforge_dspy.trust.certificate import CERTIFICATE_KEY
from rubricforge_dspy.trust.certify import certify_program
from tests.support.batch import fake_lm, read_lines
from tests.support.certify_data import frozen_program, held_out, lenient_verdict
from tests.support.long_episodes import write_long_episodes
from tests.support.records import write_labeled_jsonl


def answer(body: dict, n: int) -> dict:
    return lenient_verdict(user_text(body)) if "HAT" in user_text(body) else {"reason": "ok", "passed": True,
                                                                               "score": 0.9}


def certified(tmp_path, fake) -> str:
    """A frozen program certified on short held-out episodes: every verdict on complete evidence."""
    path, _ = frozen_program(tmp_path)
    certificate = certify_program(path, held_out(), lm=fake_lm(fake), resamples=100, concurrency=2)
    assert certificate["evidence"]["cut"] == 0 and certificate["evidence"]["complete"] == len(held_out())
    return str(path)


def test_judge_warns_when_a_certificate_on_complete_evidence_meets_cut_evidence(tmp_path, capsys):
    long, short = tmp_path / "long.jsonl", tmp_path / "short.jsonl"
    write_long_episodes(long, n_items=3, n_steps=100)  # far beyond the server preset's render budget: cut
    write_labeled_jsonl(short, held_out()[:4])
    with FakeOpenAI(answer) as fake:
        program = certified(tmp_path, fake)
        lm = ["--api-base", fake.api_base, "--model", fake.model, "--no-cache"]
        assert main(["judge", "--program", program, "--data", str(long), "--out", str(tmp_path / "a.jsonl"), *lm]) == 0
        err = capsys.readouterr().err
        assert ("warning: the program was certified on 100% complete evidence; 100% of this run's verdicts (3 of 3) "
                "were judged on cut evidence (steps clipped or elided): the certificate does not cover them") in err
        assert all(not line["evidence"]["complete"] for line in read_lines(tmp_path / "a.jsonl"))
        # the same evidence as the certificate's: nothing to say
        assert main(["judge", "--program", program, "--data", str(short), "--out", str(tmp_path / "b.jsonl"),
                     *lm]) == 0
        assert "the certificate does not cover" not in capsys.readouterr().err


def test_judge_warns_the_reverse_a_certificate_on_cut_evidence_meets_whole_episodes(tmp_path, capsys):
    from rubricforge_dspy.program.store import MANIFEST_KEY, read_program

    short = tmp_path / "short.jsonl"
    write_labeled_jsonl(short, held_out()[:4])
    with FakeOpenAI(answer) as fake:
        program = certified(tmp_path, fake)
        document = read_program(program)  # as if certified on long episodes: 3 of 4 verdicts on cut evidence
        document[MANIFEST_KEY][CERTIFICATE_KEY]["evidence"] = {"complete": 4, "cut": 12, "unknown": 0,
                                                                "cut_share": 0.75}
        edited = tmp_path / "edited.json"
        edited.write_text(json.dumps(document))
        assert main(["judge", "--program", str(edited), "--allow-unverified-program", "--data", str(short), "--out",
                     str(tmp_path / "v.jsonl"), "--api-base", fake.api_base, "--model", fake.model,
                     "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert ("warning: the program was certified on 75% cut evidence; 100% of this run's verdicts (4 of 4) were judged "
            "on complete evidence") in err


def test_judge_cascade_warns_for_its_certified_llm_stage(tmp_path, capsys):
    from rubricforge_dspy.judge.cascade import Cascade, StageRule
    from rubricforge_dspy.judge.loading import load_judge

    long = tmp_path / "long.jsonl"
    write_long_episodes(long, n_items=2, n_steps=100)
    with FakeOpenAI(answer) as fake:
        program = certified(tmp_path, fake)
        cascade = tmp_path / "cascade.json"
        Cascade([load_judge(program, check_certificate=False)], [StageRule("judge", 0.5, 0.4)]).save(cascade)
        assert main(["judge", "--cascade", str(cascade), "--allow-unverified-program", "--data", str(long), "--out",
                     str(tmp_path / "v.jsonl"), "--api-base", fake.api_base, "--model", fake.model,
                     "--no-cache", "--price", "1,4"]) == 0
    err = capsys.readouterr().err
    usd = sum(line["tokens"]["usd"] for line in read_lines(tmp_path / "v.jsonl"))
    assert f"cost: ${usd:,.6g} (2 LM-judged item(s)" in err  # a cascade's summary costs its LLM stage too
    assert "warning: stage 'judge' was certified on 100% complete evidence; 100% of this run's verdicts (2 of 2)" in err
