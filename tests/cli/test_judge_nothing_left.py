"""`judge` run again with every item judged says so and starts no LM (no embedded llama.cpp server, no request);
with one item left, or with other data, it goes the usual way."""

from __future__ import annotations

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.testing.fake_server import FakeOpenAI
from tests.support.cascade import WEBSHOP


def test_a_rerun_with_nothing_left_starts_no_lm(tmp_path, capsys, monkeypatch):
    data, out = tmp_path / "runs.jsonl", tmp_path / "v.jsonl"
    data.write_text("\n".join(WEBSHOP.read_text().splitlines()[:4]) + "\n")
    argv = ["judge", "--data", str(data), "--out", str(out)]
    with FakeOpenAI() as fake:
        assert main([*argv, "--api-base", fake.api_base, "--model", "fake-judge"]) == 0
        assert fake.n_requests == 4
    capsys.readouterr()
    started = []

    def no_lm(*args, **kwargs):  # stands for the embedded server's start (no --api-base given below)
        started.append(args)
        raise AssertionError("an LM was started with nothing left to judge")

    monkeypatch.setattr("rubricforge_dspy.cli.judge.lm_from_args", no_lm)
    monkeypatch.delenv("RUBRICFORGE_API_BASE", raising=False)
    assert main(argv) == 0
    assert "nothing to do: all 4 item(s) were judged already" in capsys.readouterr().err and not started
    # one item left (its line gone): the LM is needed again
    out.write_text("\n".join(out.read_text().splitlines()[:3]) + "\n")
    assert main(argv) == 1 and started  # (the stand-in raises: a bug's exit, proving it was called)
