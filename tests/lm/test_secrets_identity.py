"""Job identity is the judge, not the socket (the embedded server's served model, not its port), and
secrets stay secret (`--api-key-env` refuses keys; secrets in `--api-base` are redacted everywhere they
are written; the server's `Retry-After` is honoured, bounded)."""

from __future__ import annotations

import email.utils
import json
import time
from pathlib import Path

import pytest

from rubricforge_dspy.apply.job import claim_output, job_path
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.judge.execution import RetryPolicy, judge_verdict
from rubricforge_dspy.judge.fingerprint import judge_fingerprint
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.lm.errors import MAX_RETRY_AFTER, parse_retry_after
from rubricforge_dspy.serve.embedded import EmbeddedServer, served_identity
from rubricforge_dspy.testing.fake_server import DEFAULT_VERDICT, FakeOpenAI, Reply

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "evals" / "data" / "tau_bench_official" / "gpt-4o-airline.json"


# -- job identity of the embedded server ------------------------------------------------------------

def embedded_fingerprint(weights: Path, port: int):
    server = EmbeddedServer(port=port)
    server.identity = served_identity(weights)  # what start() records, without starting llama.cpp
    return judge_fingerprint(TrajectoryJudge(), make_lm(server.lm_config()))


def test_the_embedded_servers_identity_is_its_served_model_not_its_port(tmp_path):
    """Two starts of the embedded server (two ephemeral ports) are one judge: same fingerprint, so the
    output file of a killed run is resumed, not refused; other weights are another judge (the diff names
    the weights' sha256); a remote endpoint's change is still another judge, named as api_base."""
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF weights v1")
    first, second = embedded_fingerprint(weights, 40001), embedded_fingerprint(weights, 40002)
    assert first.sha256 == second.sha256
    assert "40001" not in json.dumps(first.parts)
    out = tmp_path / "v.jsonl"
    claim_output(out, first, "data", has_lines=False)
    out.write_text('{"id": "x"}\n')
    claim_output(out, second, "data", has_lines=True)  # no "belongs to another job"
    weights.write_bytes(b"GGUF weights v2")
    other = embedded_fingerprint(weights, 40001)
    assert other.sha256 != first.sha256 and "lm.served_model.weights_sha256" in other.diff(first)
    remote = [judge_fingerprint(TrajectoryJudge(), make_lm(LMConfig(model="m", api_base=f"http://h{i}:8000/v1")))
              for i in (1, 2)]
    assert remote[0].diff(remote[1]) == ["lm.api_base"]
    with pytest.raises(InputError, match="another job"):
        claim_output(out, remote[0], "data", has_lines=True)


# -- --api-key-env -----------------------------------------------------------------------------------

KEYS = ["sk-proj-Abc123def456GHI789jkl012", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "AbCdEf1234567890GhIjKlMnOp"]


@pytest.mark.parametrize("key", KEYS)
def test_a_key_pasted_as_api_key_env_is_refused_naming_the_flag_never_echoing_it(tmp_path, capsys, key, monkeypatch):
    """`--api-key-env <a key>` (and RUBRICFORGE_API_KEY_ENV=<a key>) exit 2 before any request, the
    message names the flag or variable and the hint, and the key appears nowhere in the output."""
    with FakeOpenAI() as fake:
        argv = ["judge", "--data", str(AIRLINE), "--limit", "1", "--out", str(tmp_path / "v.jsonl"),
                "--api-base", fake.api_base, "--model", "m"]
        assert main([*argv, "--api-key-env", key]) == 2
        captured = capsys.readouterr()
        assert "--api-key-env" in captured.err and "NAME" in captured.err
        assert key not in captured.err + captured.out
        monkeypatch.setenv("RUBRICFORGE_API_KEY_ENV", key)
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "RUBRICFORGE_API_KEY_ENV" in captured.err and key not in captured.err + captured.out
        assert fake.n_requests == 0
    monkeypatch.delenv("RUBRICFORGE_API_KEY_ENV")
    assert LMConfig(api_key_env="OPENAI_API_KEY").api_key_env == "OPENAI_API_KEY"  # names still work


# -- secrets inside --api-base -----------------------------------------------------------------------

def test_a_secret_in_api_base_is_redacted_everywhere_written_but_used_for_requests(tmp_path, capsys):
    """`--api-base http://user:pass@host/v1?key=...`: requests carry the real URL (the server sees the query
    and the basic-auth header), while OUT.job.json, the verdict lines, stderr (`judge LM: ...`) and the
    error message of a failing call hold no secret."""
    secrets = ("s3cretpass", "qk7Zp0Lm2Xv9")
    with FakeOpenAI() as fake:
        base = f"http://alice:{secrets[0]}@127.0.0.1:{fake.port}/v1?key={secrets[1]}"
        out = tmp_path / "v.jsonl"
        code = main(["judge", "--data", str(AIRLINE), "--limit", "2", "--out", str(out), "--api-base", base,
                     "--model", "m", "--concurrency", "1"])
        assert code == 0, capsys.readouterr().err
        assert fake.n_requests >= 1
        sent = fake.requests[0]
        assert "authorization" in {k.lower() for k in sent["headers"]}  # the user:pass reached the server
    err = capsys.readouterr().err
    written = err + out.read_text() + job_path(out).read_text()
    assert "judge LM:" in err and "REDACTED" in err
    assert not any(secret in written for secret in secrets)
    # a failing call's error message (the server is gone): redacted too
    lm = one_attempt_lm(make_lm(LMConfig(model="m", api_base=base)))
    judge = TrajectoryJudge()
    judge.set_lm(lm)
    verdict = judge_verdict(judge, "1. user: hi", RetryPolicy(max_retries=0))
    assert verdict.abstained and verdict.error_kind == "connection"
    assert "REDACTED" in verdict.error and not any(secret in verdict.error for secret in secrets)


# -- Retry-After -------------------------------------------------------------------------------------

@pytest.mark.slow  # waits out the server's Retry-After (about 4 s a form); the gaps only have lower bounds
@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_retry_after_is_honoured_in_both_forms(form):
    """A server answering 429 (then 503) with `Retry-After: 2` (or the HTTP-date 2 s ahead) is asked
    again no sooner than it asked, not after the 0-0.5 s jitter; the verdict is then produced."""
    asked = 2.0

    def respond(body, n):
        if n >= 2:
            return DEFAULT_VERDICT
        if form == "seconds":
            return ["http_429_retry_after", "http_503_retry_after"][n]
        # an HTTP-date 3 s ahead (1 s resolution: at least 2 s from now)
        return Reply(status=(429, 503)[n], retry_after=email.utils.formatdate(time.time() + 3, usegmt=True))

    with FakeOpenAI(respond, retry_after="2") as fake:
        stamps = []
        judge = TrajectoryJudge()
        judge.set_lm(one_attempt_lm(make_lm(LMConfig(model=fake.model, api_base=fake.api_base))))
        original = fake._next

        def stamped(*args):
            stamps.append(time.monotonic())
            return original(*args)

        fake._next = stamped
        outcome = judge_verdict(judge, "1. user: hi", RetryPolicy(max_retries=2, backoff=0.1, max_backoff=0.5))
    assert not outcome.abstained and outcome.attempts == 3
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert all(gap >= asked - 0.3 for gap in gaps), gaps


def test_retry_after_is_bounded():
    """A server asking for hours waits at most MAX_RETRY_AFTER; unreadable values are ignored."""
    assert parse_retry_after("86400") == MAX_RETRY_AFTER == 60.0
    assert parse_retry_after(email.utils.formatdate(time.time() + 7200, usegmt=True)) == MAX_RETRY_AFTER
    assert parse_retry_after("soon") is None and parse_retry_after("-5") == 0.0
