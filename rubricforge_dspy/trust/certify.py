"""The certify jobs: judge a held-out labeled set with a frozen program, then write its certificate into
the program's manifest (`certify_program`) or test a canary set against it (`recheck_program`).

The statistics and checks live in `rubricforge_dspy.trust.certificate`; this module only runs the judge
(`rubricforge_dspy.apply.stream.judge_stream`) and moves JSON between files.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.core.verdict import read_verdicts
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.program.store import data_fingerprint, read_manifest, update_manifest
from rubricforge_dspy.trust.certificate import (
    BOOTSTRAP_RESAMPLES,
    CERTIFICATE_KEY,
    CertificateError,
    Recheck,
    certificate_for,
    check_held_out,
    recheck,
)

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.apply.summary import BatchSummary
    from rubricforge_dspy.judge.contract import BaseJudge
    from rubricforge_dspy.lm.budget import TokenBudget
    from rubricforge_dspy.lm.pricing import CostBudget, Price


@contextmanager
def _verdict_path(verdicts_out: PathArg | None) -> Iterator[Path]:
    if verdicts_out is not None:
        yield Path(verdicts_out)
        return
    with tempfile.TemporaryDirectory(prefix="rubricforge-certify-") as tmp:
        yield Path(tmp) / "verdicts.jsonl"


def judge_labeled(judge: BaseJudge, trajectories: list[Trajectory], out_path: PathArg, *, lm: dspy.BaseLM | None,
                  concurrency: int = 4, token_budget: int | TokenBudget | None = None, price: Price | None = None,
                  cost_budget: float | CostBudget | None = None,
                  on_summary: Callable[[BatchSummary], None] | None = None) -> list[dict[str, Any]]:
    """Judge `trajectories` into `out_path` (resumable) and return their verdict lines, in input order.
    Every trajectory must end up with exactly one line; lines of other ids in the file are refused.

    No cache answers (a certificate or a drift check must measure the LM as it answers now): no verdict
    cache, and batch judging always runs with DSPy's response cache off. `token_budget`: the run's token cap
    (`apply.budget`; `BudgetExhausted` once what was judged is written to `out_path`); `price` and `cost_budget`:
    the judge LM's price and the run's cap in US dollars (`apply.options.JobOptions`'); `on_summary` is handed the
    run's `apply.summary.BatchSummary` (its tokens and cost) when it finished."""
    from rubricforge_dspy.apply.stream import judge_stream

    summary = judge_stream(judge, trajectories, out_path, concurrency=concurrency, lm=lm, cache=None, progress=False,
                           token_budget=token_budget, price=price, cost_budget=cost_budget)
    if on_summary is not None:
        on_summary(summary)
    by_id = read_verdicts(out_path)
    wanted = [t.id for t in trajectories]
    foreign = sorted(set(by_id) - set(wanted))
    if foreign:
        raise CertificateError(f"{out_path}: holds verdicts of items not in this data (first: {foreign[0]}); "
                               "use a fresh --verdicts-out")
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise CertificateError(f"{out_path}: no verdict for {len(missing)} item(s) (first: {missing[0]})")
    return [by_id[i] for i in wanted]


def _check_labels(trajectories: list[Trajectory], where: str) -> None:
    if not trajectories:
        raise CertificateError(f"{where}: no trajectories loaded")
    require_labels(trajectories, f"{where}: a certificate")
    if len({t.label for t in trajectories}) < 2:
        only = "passed" if trajectories[0].label else "failed"
        raise CertificateError(f"{where}: every item {only}; a certificate needs both passed and failed items "
                               "(kappa and AUC are undefined on one class)")


def floor_of(trajectories: list[Trajectory], manifest: dict[str, Any], where: str
             ) -> tuple[list[dict[str, Any]], str] | None:
    """The symptom floor's verdicts on the certification items (`floor.margin.floor_verdicts`): the
    program's own floor, else one cross-validated by task on these items; None (with a warning) when
    neither can be fit."""
    import warnings

    from rubricforge_dspy.judge.floor import FloorError
    from rubricforge_dspy.trust.floor_margin import floor_verdicts

    try:
        return floor_verdicts(trajectories, manifest.get("floor"))
    except FloorError as error:
        warnings.warn(f"{where}: no margin over the symptom floor in the certificate: {error}", stacklevel=2)
        return None


def reading_of(judge: BaseJudge) -> dict[str, Any]:
    """How `judge` reads an episode, for its certificate: ``{"mode": "budget" | "segments" | "explore", ...}``
    with the reading settings of a long-episode judge (`reading_settings`: the overlap, the caps) and its
    render budget."""
    settings = judge.reading_settings() if hasattr(judge, "reading_settings") else {}
    mode = settings.get("read") or getattr(judge, "read_mode", None) or "budget"
    render = getattr(judge, "render_config", None)
    return {**{k: v for k, v in settings.items() if k != "read"}, "mode": mode,
            **({"render_tokens": render.max_tokens} if render is not None else {})}


def _certifiable(program_path: PathArg, judge: BaseJudge) -> dict[str, Any]:
    """The manifest the certificate of the judge at `program_path` goes into (`program.store.read_manifest`: a
    frozen program's, or a segments or explorer judge's own: its `base_manifest` when it was saved without one).

    Raises:
        CertificateError: the judge calls no LM (a floor, a recorded stage), or its file has no manifest.
    """
    if not judge.calls_lm:
        raise CertificateError(f"{program_path}: a {type(judge).__name__} calls no LM, so there is no LM to certify it "
                               "with; a symptom floor is cross-validated by `rubricforge floor --data`, a cascade is "
                               "measured by `rubricforge certify CASCADE.json`")
    manifest = read_manifest(program_path)
    if manifest is None and hasattr(judge, "base_manifest"):  # a segments or explorer judge saved without one
        manifest = judge.base_manifest()
    if manifest is None:
        raise CertificateError(f"{program_path}: no RubricForge manifest; freeze the program first")
    return manifest


def certify_program(program_path: PathArg, trajectories: list[Trajectory], *, lm: dspy.BaseLM | None,
                    out_program: PathArg | None = None, verdicts_out: PathArg | None = None,
                    concurrency: int = 4, confidence: float = 0.95, seed: int = 0,
                    resamples: int = BOOTSTRAP_RESAMPLES, where: str = "data",
                    labelers: Mapping[str, Mapping[str, int | None]] | None = None,
                    token_budget: int | TokenBudget | None = None, price: Price | None = None,
                    cost_budget: float | CostBudget | None = None,
                    on_summary: Callable[[BatchSummary], None] | None = None) -> dict[str, Any]:
    """Judge held-out `trajectories` with the program at `program_path` on `lm` and write the certificate
    into the manifest of `out_program` (default: the program itself).

    Any judge `load_judge` loads that calls an LM and whose file holds a manifest can be certified: a frozen
    program (a budgeted `TrajectoryJudge`, a hybrid stack) or a saved segments or explorer judge (its own
    document's manifest). The certificate records how the judge read (``read``: its mode and settings) beside
    the evidence shares of its verdicts (``evidence``: complete vs cut).

    Args:
        program_path: a frozen program with a RubricForge manifest, or a saved segments or explorer judge.
        trajectories: labeled items of both classes the program never trained or selected on.
        lm: the LM the certificate is bound to (the one the judge will run on).
        out_program: where to write the certified program (default: `program_path` itself).
        verdicts_out: keep the verdict lines there (default: a temporary file); recorded in the certificate.
        concurrency: judge calls in flight.
        confidence: the level of the certificate's intervals.
        seed: the bootstrap's seed.
        resamples: the bootstrap's resamples.
        where: how the data is named in error messages.
        labelers: each item's labels by labeler (`LabelFile.ratings`, a labels file with a labeler column): the
            certificate then records, under ``labelers``, the labelers' agreement with each other (the human
            ceiling) and the judge's with each labeler (`judge_vs_labelers`).
        token_budget: the most tokens the judging may spend (`apply.budget`), or a `TokenBudget` shared with other
            runs (`induce`'s); give `verdicts_out` with it, so that a run stopped at the budget (`BudgetExhausted`)
            keeps its verdicts for the re-run.
        price: the judge LM's price (`apply.pricing.Price`; None: litellm's cost map's, when it knows the model).
        cost_budget: the most US dollars the judging may spend (or a shared `apply.pricing.CostBudget`), enforced as
            `token_budget` is; needs a price.
        on_summary: handed the judging run's `apply.summary.BatchSummary` (tokens, cost) when it finished.

    Returns:
        The certificate written into the manifest (`trust.certificate.compute_certificate`'s numbers,
        the LM's fingerprint, the data fingerprint, the rubric hash and, when it can be fit, the margin
        over the symptom floor).

    Raises:
        CertificateError: the program has no manifest, or calls no LM; no trajectories, or one class only; the
            data is the program's own or overlaps its training/validation ids or tasks.
        ProgramError: `program_path` is not a readable program.
    """
    judge = load_judge(program_path, check_certificate=False)
    manifest = _certifiable(program_path, judge)
    _check_labels(trajectories, where)
    fingerprint = data_fingerprint(trajectories)
    check_held_out(manifest, [t.id for t in trajectories], [f"{t.domain}/{t.task_id}" for t in trajectories],
                   fingerprint, where)
    with _verdict_path(verdicts_out) as path:
        records = judge_labeled(judge, trajectories, path, lm=lm, concurrency=concurrency, token_budget=token_budget,
                                price=price, cost_budget=cost_budget, on_summary=on_summary)
    certificate = certificate_for(records, lm=lm, data_fingerprint=fingerprint,
                                  rubric_sha256=manifest.get("rubric_sha256") or judge.rubric_sha256,
                                  confidence=confidence, seed=seed, resamples=resamples, where=where,
                                  floor=floor_of(trajectories, manifest, where), reading=reading_of(judge))
    if labelers:
        certificate["labelers"] = judge_vs_labelers(records, labelers, confidence=confidence, seed=seed)
    if verdicts_out is not None:
        certificate["verdicts"] = str(verdicts_out)
    update_manifest(program_path, {**manifest, CERTIFICATE_KEY: certificate}, out_path=out_program)
    return certificate


JUDGE = "judge"  # the judge's name among the labelers in `judge_vs_labelers`


def judge_vs_labelers(records: list[dict[str, Any]], labelers: Mapping[str, Mapping[str, int | None]], *,
                      confidence: float = 0.95, seed: int = 0, resamples: int | None = None) -> dict[str, Any]:
    """The labelers' agreement with each other and the judge's agreement with each labeler, on the judged items.

    Args:
        records: the judge's verdict lines (``id``, ``passed``, ``abstained``); an abstention is no verdict.
        labelers: per item id, ``{labeler: 0 | 1 | None}`` (None: the labeler gave no label).
        confidence: the level of the intervals.
        seed: the bootstrap's seed.
        resamples: bootstrap resamples (default `metrics.LABELER_RESAMPLES`).

    Returns:
        ``{"humans": labeler_agreement(...), "judge": [{"labeler", "n", "agreement", "kappa"}, ...]}``: each
        statistic ``{"value", "low", "high"}`` (`metrics.agreement.labeler_agreement`: a percentile bootstrap
        over items with the given seed).
    """
    from rubricforge_dspy.metrics import LABELER_RESAMPLES, labeler_agreement

    options = {"confidence": confidence, "seed": seed, "resamples": resamples or LABELER_RESAMPLES}
    judged = {r["id"]: int(bool(r["passed"])) for r in records if not r.get("abstained")}
    items = [dict(labelers[i]) for i in judged if i in labelers]
    names = sorted({who for item in items for who in item}, key=str)
    if JUDGE in names:
        raise CertificateError(f"a labeler is named {JUDGE!r}, the name the judge takes here; rename the labeler")
    versus = []
    for name in names:
        pairs = [{name: labelers[i][name], JUDGE: v} for i, v in judged.items()
                 if i in labelers and labelers[i].get(name) is not None]
        pair = labeler_agreement(pairs, **options)["pairs"]
        if pair:
            versus.append({"labeler": name, "n": pair[0]["n"], "agreement": pair[0]["agreement"],
                           "kappa": pair[0]["kappa"]})
    return {"humans": labeler_agreement(items, **options), "judge": versus}


def format_judge_vs_labelers(report: dict[str, Any]) -> list[str]:
    """`judge_vs_labelers` as lines: the human ceiling, then the judge beside each labeler, e.g. ``the judge agrees
    with A on 85.0% [..] of 100 (kappa 0.70 [..])`` (names escaped for a terminal)."""
    from rubricforge_dspy.core.terminal import terminal_safe
    from rubricforge_dspy.metrics import format_labeler_agreement

    def stat(s: Mapping[str, float], f: str) -> str:
        return f"{s['value']:{f}} [{s['low']:{f}}, {s['high']:{f}}]"

    lines = ["labelers (the human ceiling):",
             *("  " + terminal_safe(line) for line in format_labeler_agreement(report["humans"]))]
    if not report["judge"]:
        lines.append("  the judge shares no judged item with any labeler")
    for row in report["judge"]:
        lines.append(f"  the judge agrees with {terminal_safe(str(row['labeler']))} on {stat(row['agreement'], '.1%')} "
                     f"of {row['n']} (Cohen's kappa {stat(row['kappa'], '.2f')})")
    return lines


def recheck_program(program_path: PathArg, trajectories: list[Trajectory], *, lm: dspy.BaseLM | None,
                    verdicts_out: PathArg | None = None, alpha: float = 0.05,
                    concurrency: int = 4, where: str = "canary") -> Recheck:
    """Re-judge the labeled canary `trajectories` and test their false-pass rate against the certificate."""
    manifest = read_manifest(program_path) or {}
    certificate = manifest.get(CERTIFICATE_KEY)
    if not certificate:
        raise CertificateError(f"{program_path}: no certificate to recheck against; run `rubricforge certify` first")
    if not trajectories:
        raise CertificateError(f"{where}: no trajectories loaded")
    judge = load_judge(program_path, lm=lm)  # warns, when it runs, if the LM is not the certified one
    with _verdict_path(verdicts_out) as path:
        records = judge_labeled(judge, trajectories, path, lm=lm, concurrency=concurrency)
    return recheck(certificate, records, alpha=alpha, where=where)
