"""The certificate: statistics against independent references, the held-out refusal, drift warnings on
load, the canary recheck, and `rubricforge certify` / `show` end to end against the fake server."""

from __future__ import annotations

import warnings

import dspy
import numpy as np
import pytest
from scipy import stats

from rubricforge_dspy import metrics
from rubricforge_dspy.cli.main import main
from rubricforge_dspy.evidence.render import RENDER_VERSION
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.program.drift import UncertifiedJudgeWarning
from rubricforge_dspy.program.store import data_fingerprint, read_program
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text
from rubricforge_dspy.trust.certificate import CertificateError, compute_certificate, recheck
from rubricforge_dspy.trust.certify import certify_program
from tests.support.certificate import frozen_program, held_out, lenient_verdict
from tests.support.records import write_labeled_jsonl


def _records(labels, passed, scores, tasks=None, **extra):
    tasks = tasks or [f"t{i}" for i in range(len(labels))]
    return [{"id": f"i{i}", "task_id": tasks[i], "label": int(y), "passed": bool(p), "score": float(s),
             "abstained": False, **extra} for i, (y, p, s) in enumerate(zip(labels, passed, scores, strict=True))]


@pytest.fixture
def program(tmp_path):
    return frozen_program(tmp_path)


def test_statistics_match_independent_references():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 40)
    scores = np.clip(labels * 0.5 + rng.uniform(0, 0.5, 40), 0, 1)
    passed = scores >= 0.5
    cert = compute_certificate(_records(labels, passed, scores), resamples=200)
    fp = int(((labels == 0) & passed).sum())
    negatives = int((labels == 0).sum())
    reference = stats.binomtest(fp, negatives).proportion_ci(0.95, method="exact")
    assert cert["false_pass"]["k"] == fp and cert["false_pass"]["n"] == negatives
    assert cert["false_pass"]["interval"] == pytest.approx([reference.low, reference.high], abs=1e-4)
    assert cert["accuracy"]["value"] == pytest.approx(np.mean(labels == passed), abs=1e-4)
    low, high = cert["accuracy"]["interval"]
    assert low <= cert["accuracy"]["value"] <= high
    # ECE by hand: 10 equal-width bins.
    bins = np.minimum((scores * 10).astype(int), 9)
    ece = sum((bins == b).mean() * abs(labels[bins == b].mean() - scores[bins == b].mean()) for b in set(bins))
    assert cert["ece"]["value"] == pytest.approx(ece, abs=1e-4)
    assert cert["contradictions"] is None  # the lines do not record it: not claimed as zero


def test_two_false_passes_of_two_get_an_exact_not_a_degenerate_interval():
    low, high = metrics.proportion_ci(2, 2)
    assert high == 1.0 and low == pytest.approx(0.025 ** 0.5, abs=1e-9)  # Clopper-Pearson: (alpha/2)**(1/n)
    # Wilson by its closed form: (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), k=3, n=10
    z, p, n = stats.norm.ppf(0.975), 0.3, 10
    centre, half = p + z * z / (2 * n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    wilson = metrics.proportion_ci(3, 10, method="wilson")
    assert wilson == pytest.approx(((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)))


def test_repeated_trials_widen_the_clustered_interval_like_unrepeated_tasks():
    rng = np.random.default_rng(0)
    correct = rng.random(30) < 0.7
    tasks = np.repeat(np.arange(30), 4)  # four identical trials per task
    clustered = metrics.bootstrap_ci(np.mean, np.repeat(correct, 4), clusters=tasks, n_resamples=4000)
    naive = metrics.bootstrap_ci(np.mean, np.repeat(correct, 4), n_resamples=4000)
    reference = stats.bootstrap((correct,), np.mean, n_resamples=4000, method="percentile",
                                random_state=1).confidence_interval
    assert clustered.high - clustered.low > 1.5 * (naive.high - naive.low)
    assert clustered.low == pytest.approx(reference.low, abs=0.03)
    assert clustered.high == pytest.approx(reference.high, abs=0.03)


def test_certify_writes_a_loadable_certificate_and_load_checks_the_lm(program, tmp_path):
    path, _ = program
    lm = ScriptedLM(lambda messages: lenient_verdict(last_user_text(messages)), model="scripted-a")
    data = held_out()
    cert = certify_program(path, data, lm=lm, verdicts_out=tmp_path / "v.jsonl", resamples=200)
    # failures are flights 9, 11, ..., 23; 11, 15, 19 and 23 are false passes.
    assert (cert["n"], cert["positives"], cert["negatives"]) == (16, 8, 8)
    assert cert["false_pass"]["k"] == 4 and cert["false_pass"]["rate"] == 0.5
    assert cert["accuracy"]["value"] == 0.75
    assert cert["data_fingerprint"] == data_fingerprint(data)
    assert cert["lm_fingerprint"]["parts"]["model"] == "scripted-a"
    manifest = read_program(path)["rubricforge"]  # verifies the rubric hash: still loadable
    assert manifest["certificate"] == cert
    text = "[1] USER: book HAT001\nFINAL ANSWER: booked"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)
        load_judge(path, lm=lm)(trajectory=text)  # the certified LM: no warning, loaded or run
    other = ScriptedLM(lambda messages: lenient_verdict(last_user_text(messages)), model="scripted-b")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)
        judge = load_judge(path)
        judge.set_lm(other)  # the DSPy idiom: nothing runs yet, nothing to warn about
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            judge(trajectory=text)
    drift = [w for w in caught if issubclass(w.category, UncertifiedJudgeWarning)]
    assert len(drift) == 1 and "model: certified 'scripted-a', now 'scripted-b'" in str(drift[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)
        judge.set_lm(lm)
        judge(trajectory=text)  # back on the certified LM: nothing to say


def test_an_uncertified_program_warns_once_when_it_first_runs_not_on_load(program):
    path, _ = program
    lm = ScriptedLM(lambda messages: lenient_verdict(last_user_text(messages)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)
        judge = load_judge(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with dspy.context(lm=lm):
            judge(trajectory="[1] USER: hi")
            judge(trajectory="[1] USER: hi again")
    assert [str(w.message) for w in caught if issubclass(w.category, UncertifiedJudgeWarning)] == [
        f"{path}: this judge has no certificate: how often it passes failed trajectories was never measured on "
        "held-out data; run `rubricforge certify`"]


def test_certify_refuses_data_the_program_was_induced_on(program, tmp_path):
    path, train = program
    lm = ScriptedLM(lambda messages: lenient_verdict(last_user_text(messages)))
    with pytest.raises(CertificateError, match="same data fingerprint"):
        certify_program(path, train, lm=lm)
    with pytest.raises(CertificateError, match=r"1 id\(s\) overlap .*synthetic:t7:0"):
        certify_program(path, held_out() + [train[7]], lm=lm)
    assert lm.calls == 0 and "certificate" not in read_program(path)["rubricforge"]


def test_recheck_is_a_one_sided_exact_test_against_the_certified_rate():
    cert = {"false_pass": {"rate": 0.1}}
    labels, passed = [0] * 20, [True] * 6 + [False] * 14
    result = recheck(cert, _records(labels, passed, [0.6 if p else 0.2 for p in passed]))
    assert result.p_value == pytest.approx(stats.binomtest(6, 20, 0.1, alternative="greater").pvalue)
    assert result.worse and "+0.200" in result.format()
    calm = recheck(cert, _records([0] * 20, [True] * 2 + [False] * 18, [0.5] * 20))
    assert not calm.worse


def test_certify_show_and_recheck_cli_against_the_fake_server(program, tmp_path, capsys):
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text

    path, _ = program
    data = write_labeled_jsonl(tmp_path / "held_out.jsonl", held_out())
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        lm_flags = ["--api-base", fake.api_base, "--model", fake.model]
        assert main(["certify", str(path), "--data", str(data), "--resamples", "200", *lm_flags]) == 0
        assert fake.n_requests == 16
        capsys.readouterr()
        assert main(["show", str(path)]) == 0
        shown = capsys.readouterr().out
        assert "n 16 held-out items (8 passed, 8 failed, 16 tasks)" in shown
        assert "false-pass rate 0.500 (4/8)" in shown and f"@ {fake.api_base}" in shown
    # The LM behind the endpoint drifted: it now passes every failure of the canary set.
    canary = write_labeled_jsonl(tmp_path / "canary.jsonl", held_out())
    with FakeOpenAI(responder=lambda body, n: {"reason": "fine", "passed": True, "score": 0.9},
                    model=fake.model) as again:
        flags = ["--api-base", again.api_base, "--model", again.model]
        with warnings.catch_warnings():
            warnings.simplefilter("error", UncertifiedJudgeWarning)  # a new loopback port is not another LM
            code = main(["certify", str(path), "--recheck", "--data", str(canary), *flags])
    out = capsys.readouterr().out
    # worse: exit 4 (EXIT_NO), never 1 (a bug's)
    assert code == 4 and "SIGNIFICANTLY HIGHER" in out and "(8/8 failed items passed) vs certified 0.500: +0.500" in out
    assert f"p = {0.5 ** 8:.4g}" in out


def test_drift_ignores_a_loopback_port_but_not_another_host():
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.program.drift import check_drift

    def manifest(base):
        from rubricforge_dspy.judge.fingerprint import lm_fingerprint

        fp = lm_fingerprint(make_lm(LMConfig(model="m@rev1", api_base=base)))
        return {"certificate": {"lm_fingerprint": {"sha256": fp.sha256, "parts": fp.parts},
                                "render_version": RENDER_VERSION}}

    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)
        other = make_lm(LMConfig(model="m@rev1", api_base="http://127.0.0.1:5000/v1"))
        assert check_drift(manifest("http://127.0.0.1:4000/v1"), other) == []
    with pytest.warns(UncertifiedJudgeWarning, match="api_base: certified 'http://gpu-a:30000/v1'"):
        check_drift(manifest("http://gpu-a:30000/v1"), make_lm(LMConfig(model="m@rev1", api_base="http://gpu-b:30000/v1")))
    with pytest.warns(UncertifiedJudgeWarning, match="max_tokens"):
        check_drift(manifest("http://gpu-a:30000/v1"),
                    make_lm(LMConfig(model="m@rev1", api_base="http://gpu-a:30000/v1", max_tokens=64)))


def test_a_certificate_measured_on_another_render_version_warns(tmp_path):
    """Render version 2 changed what the judge reads; a certificate made on version 1 text (or before
    versions were recorded) no longer covers it, and loading the program says so."""
    from rubricforge_dspy.judge.fingerprint import lm_fingerprint
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.program.drift import check_drift

    lm = make_lm(LMConfig(model="m@rev1", api_base="http://gpu-a:30000/v1"))
    fp = lm_fingerprint(lm)
    current = {"certificate": {"lm_fingerprint": {"sha256": fp.sha256, "parts": fp.parts},
                               "render_version": RENDER_VERSION}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncertifiedJudgeWarning)
        assert check_drift(current, lm) == []
    for old in ({**current["certificate"], "render_version": RENDER_VERSION - 1},
                {k: v for k, v in current["certificate"].items() if k != "render_version"}):
        recorded = old.get("render_version", 1)  # a certificate without one was measured on version 1
        with pytest.warns(UncertifiedJudgeWarning, match=f"render version {recorded}; this install "
                                                         f"renders version {RENDER_VERSION}"):
            assert check_drift({"certificate": old}, lm) == ["render.version"]


def test_new_certificates_record_the_render_version():
    from rubricforge_dspy.trust.certificate import certificate_for

    records = [{"id": str(i), "task_id": str(i), "label": i % 2, "passed": True, "score": 0.9} for i in range(4)]
    assert certificate_for(records, lm=None, data_fingerprint="d", rubric_sha256="r",
                           resamples=50)["render_version"] == RENDER_VERSION


def test_certify_reports_progress_on_stderr_never_on_stdout(program, tmp_path, capsys, monkeypatch):
    """Off a terminal, `certify` writes a progress line every RUBRICFORGE_PROGRESS_SECONDS (0: every verdict)
    with items done and the total; stdout (parsed) holds none of it."""
    from rubricforge_dspy.testing.fake_server import FakeOpenAI, user_text

    path, _ = program
    data = write_labeled_jsonl(tmp_path / "held_out.jsonl", held_out())
    monkeypatch.setenv("RUBRICFORGE_PROGRESS_SECONDS", "0")
    with FakeOpenAI(responder=lambda body, n: lenient_verdict(user_text(body))) as fake:
        assert main(["certify", str(path), "--data", str(data), "--resamples", "200",
                     "--api-base", fake.api_base, "--model", fake.model]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("judging: ")]
    assert lines[0].startswith("judging: 1/16 verdicts") and "left" in lines[0]
    assert lines[-1].startswith("judging: 16/16 verdicts") and lines[-1].endswith("(done)")
    assert "judging:" not in captured.out
