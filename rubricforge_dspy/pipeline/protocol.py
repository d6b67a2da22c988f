"""The evaluation protocol, end to end: split -> induce -> freeze -> judge the test split with every
judge -> per-criterion ablation -> persisted predictions -> report.

Everything the report shows is recomputed from the files this writes (see `rubricforge_dspy.report`
for the run-directory contract), so a run can be re-rendered, audited, or compared later.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import dspy
import orjson

from rubricforge_dspy.apply.stream import judge_stream
from rubricforge_dspy.core.criteria import Criterion
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.judge_names import FLOOR, HYBRID, LENGTH_ONLY
from rubricforge_dspy.core.presets import LIBRARY
from rubricforge_dspy.core.rubric import parse_criteria, without_criterion
from rubricforge_dspy.core.sizes import warn_small
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.data.split import DEFAULT_FRACTIONS, Split, split_by_task
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.induction.inducer import InductionConfig
from rubricforge_dspy.judge.baselines import (
    Majority,
    fewshot_judge,
    geval_judge,
    heuristic,
    length_only,
    oracle,
    symptom_floor,
)
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.pipeline.induce_job import induce_and_freeze
from rubricforge_dspy.pipeline.phases import PhaseClock

logger = logging.getLogger(__name__)

INDUCED = "induced"
JUDGES = ("oracle", INDUCED, HYBRID, "geval", "fewshot", "heuristic", FLOOR, LENGTH_ONLY, "majority")


@dataclass(frozen=True)
class ProtocolConfig:
    """The settings of the evaluation protocol: the induction's own `InductionConfig` (nested, every field
    reaches `induce`), the split, the few-shot baseline, the ablation and the judging sizes.

    Attributes:
        induction: the induction's settings, as `induce` takes them (budget, minibatch, seed, false-pass
            weight and cap, calibration, merge, the consecutive LM error limit, rubric length, threads).
            Its seed also seeds the split by task and the few-shot demos.
        fewshot_k: demos of the few-shot baseline.
        fractions: train/val/test shares of the tasks.
        ablation: judge the test split once per criterion, without it.
        concurrency: judge requests in flight on the test split.
        render: the render of every LLM judge.
        demo_max_tokens: the few-shot demos' smaller render budget (small models); None: the render's.
    """

    # Sizes: the library's defaults (rubricforge_dspy.core.presets.LIBRARY); `pipeline.demo.protocol_config`
    # takes them from a preset instead.
    induction: InductionConfig = field(default_factory=InductionConfig)
    fewshot_k: int = 4
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    ablation: bool = True
    concurrency: int = LIBRARY.concurrency
    render: RenderConfig = field(default_factory=lambda: RenderConfig.of(LIBRARY))
    demo_max_tokens: int | None = LIBRARY.demo_max_tokens


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "criterion"


def _warn(one_class: bool, message: str, *args: object) -> None:
    """A step skipped: a warning, or `warn_small` when the cause is a split of one class (its size)."""
    if one_class:
        warn_small(logger, message, *args)
    else:
        logger.warning(message, *args)


def write_direct(path: Path, trajectories: list[Trajectory], judge_fn: Callable[[Trajectory], Any], name: str) -> None:
    """Persist a non-LLM judge's verdicts as verdict lines (`rubricforge_dspy.core.verdict.verdict_line`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for t in trajectories:
            v = judge_fn(t)
            verdict = Verdict.from_answer(bool(v.passed), float(v.score), v.reason)
            out.write(orjson.dumps(verdict_line(t, verdict, model=name)) + b"\n")


def _judge_llm(judge: TrajectoryJudge, trajectories: list[Trajectory], path: Path, lm: dspy.BaseLM,
               config: ProtocolConfig, cache_dir: Path) -> dict[str, Any]:
    summary = judge_stream(judge, trajectories, path, concurrency=config.concurrency, lm=lm,
                           cache=cache_dir, progress=True)
    logger.info("%s: %s", path.name, summary.format())
    return summary.to_dict()


def write_floor_predictions(out_dir: Path, split: Split, predictions: Path) -> list[str]:
    """The symptom floor and the length-only model, fit on the training split, judge the test split
    (``predictions/floor.jsonl``, ``predictions/length_only.jsonl``; models in ``floor.json``)."""
    from rubricforge_dspy.judge.floor import FloorError

    try:
        models = {FLOOR: symptom_floor(split.train), LENGTH_ONLY: length_only(split.train)}
    except FloorError as error:
        _warn(len({t.label for t in split.train}) < 2, "no floor rows: %s", error)
        return [f"no floor or length-only rows: {error}"]
    for name, model in models.items():
        write_direct(predictions / f"{name}.jsonl", split.test, model, name)
    (out_dir / "floor.json").write_text(json.dumps({k: m.to_dict() for k, m in models.items()}, indent=2))
    return []


def write_hybrid_predictions(out_dir: Path, split: Split, val_verdicts: Sequence[Verdict | None], induced_path: Path,
                             program_path: PathArg, max_false_pass: float | None) -> list[str]:
    """The hybrid judge (`floor.hybrid`): its stack fit on the induced judge's validation verdicts, its
    test verdicts computed from the induced judge's persisted test verdicts (no extra LM call); the
    stack is also frozen into ``<program>.hybrid.json`` next to the program. Notes when it cannot be fit."""
    from rubricforge_dspy.core.verdict import read_verdicts
    from rubricforge_dspy.evidence.features import feature_values
    from rubricforge_dspy.judge.floor import FloorError
    from rubricforge_dspy.judge.hybrid import HYBRID_KEY, fit_stack
    from rubricforge_dspy.program.store import update_manifest

    try:
        stack = fit_stack(val_verdicts, split.val, max_false_pass)
    except (FloorError, ValueError) as error:
        _warn(len({t.label for t in split.val}) < 2, "no hybrid row: %s", error)
        return [f"no hybrid row: {error}"]
    records = read_verdicts(induced_path)
    with (induced_path.parent / f"{HYBRID}.jsonl").open("wb") as out:
        for t in split.test:
            verdict = stack.verdict(Verdict.from_dict(records[t.id]), feature_values(t))
            out.write(orjson.dumps(verdict_line(t, verdict, model=HYBRID)) + b"\n")
    (out_dir / "hybrid.json").write_text(json.dumps(stack.to_dict(), indent=2))
    hybrid_program = Path(program_path).with_suffix(".hybrid.json")
    shutil.copyfile(program_path, hybrid_program)
    update_manifest(hybrid_program, {HYBRID_KEY: stack.to_dict()})
    return []


def certify_from_predictions(program_path: PathArg, path: Path, test: list[Trajectory], judge_lm: dspy.BaseLM,
                             floor_path: Path | None = None) -> dict[str, Any] | None:
    """Write the induced judge's certificate, measured on the test split it never saw (its persisted
    verdicts: no extra judge call), into the frozen program, with its margin over the symptom floor's
    verdicts on the same items (`floor_path`, when written). None when the test split has one class."""
    from rubricforge_dspy.core.verdict import read_verdicts
    from rubricforge_dspy.program.store import data_fingerprint, read_program, update_manifest
    from rubricforge_dspy.trust.certificate import CERTIFICATE_KEY, certificate_for

    if len({t.label for t in test}) < 2:
        warn_small(logger, "the test split has one class: the induced judge is not certified")
        return None
    records = list(read_verdicts(path).values())
    manifest = read_program(program_path)["rubricforge"]
    floor = (list(read_verdicts(floor_path).values()), "the symptom floor fit on the training split") \
        if floor_path is not None and floor_path.exists() else None
    certificate = certificate_for(records, lm=judge_lm, data_fingerprint=data_fingerprint(test),
                                  rubric_sha256=manifest.get("rubric_sha256"), where="test split", floor=floor)
    update_manifest(program_path, {CERTIFICATE_KEY: certificate})
    return certificate


RUN_OUTPUTS = ("predictions", "ablation", "gepa", "cache", "figures", "run.json", "report.md", "report.json",
               "floor.json", "hybrid.json")


def clear_run(out_dir: Path) -> None:
    """Remove a previous run's outputs (only the files this module writes), so a run starts over."""
    for name in RUN_OUTPUTS:
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def run_protocol(trajectories: list[Trajectory], out_dir: PathArg, *, judge_lm: dspy.LM, reflection_lm: dspy.LM,
                 judge_lm_name: str, reflection_lm_name: str, program_path: PathArg, dataset: str,
                 config: ProtocolConfig = ProtocolConfig(), notes: str = "", resume: bool = False,
                 clock: PhaseClock | None = None) -> Path:
    """Run the whole protocol on `trajectories`; returns the run directory holding report.md.

    By default a previous run in `out_dir` is cleared first; `resume=True` keeps it, so verdicts
    already persisted are not judged again and GEPA continues from its checkpoint. Each phase's wall and CPU
    seconds (`pipeline.phases.PhaseClock`; `clock` to add a caller's phases after) are in run.json's ``phases``.
    """
    from rubricforge_dspy.report import write_report

    out_dir, program_path = Path(out_dir), Path(program_path)
    if not resume:
        clear_run(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    clock = clock if clock is not None else PhaseClock()
    split = split_by_task(trajectories, config.fractions, config.induction.seed)
    logger.info("split: %s", split.summary())
    cache_dir = out_dir / "cache"

    with clock.phase("induce (GEPA)"):
        induction = induce_and_freeze(
            split.train, split.val, program_path, judge_lm=judge_lm, reflection_lm=reflection_lm,
            config=config.induction,
            init=TrajectoryJudge(render_config=config.render), log_dir=out_dir / "gepa", lm_name=judge_lm_name,
        )

    predictions = out_dir / "predictions"
    test = split.test
    write_direct(predictions / "oracle.jsonl", test, oracle, "oracle")
    write_direct(predictions / "heuristic.jsonl", test, heuristic, "heuristic")
    write_direct(predictions / "majority.jsonl", test, Majority(split.train), "majority")
    batches = {}
    with clock.phase("judge the test split: induced"):
        batches[INDUCED] = _judge_llm(induction.judge, test, predictions / f"{INDUCED}.jsonl", judge_lm, config,
                                      cache_dir)
    with clock.phase("judge the test split: G-Eval and few-shot baselines"):
        batches["geval"] = _judge_llm(geval_judge(config.render), test, predictions / "geval.jsonl", judge_lm,
                                      config, cache_dir)
        batches["fewshot"] = _judge_llm(fewshot_judge(split.train, config.fewshot_k, config.induction.seed,
                                                      config.render, config.demo_max_tokens),
                                        test, predictions / "fewshot.jsonl", judge_lm, config, cache_dir)

    with clock.phase("floor, length-only and hybrid rows"):
        floor_notes = write_floor_predictions(out_dir, split, predictions)
        floor_notes += write_hybrid_predictions(out_dir, split, induction.val_verdicts,
                                                predictions / f"{INDUCED}.jsonl", program_path,
                                                config.induction.max_false_pass)
    hybrid_program = Path(program_path).with_suffix(".hybrid.json")
    with clock.phase("certify"):
        certify_from_predictions(program_path, predictions / f"{INDUCED}.jsonl", test, judge_lm,
                                 floor_path=predictions / f"{FLOOR}.jsonl")
        if (predictions / f"{HYBRID}.jsonl").exists():
            certify_from_predictions(hybrid_program, predictions / f"{HYBRID}.jsonl", test, judge_lm,
                                     floor_path=predictions / f"{FLOOR}.jsonl")

    criteria = parse_criteria(induction.judge.rubric)
    if config.ablation and criteria:
        with clock.phase("ablation: one criterion left out at a time"):
            _ablate(induction.judge.rubric, criteria, test, out_dir / "ablation", judge_lm, config, cache_dir)

    run = {
        "lm": judge_lm_name, "reflection_lm": reflection_lm_name, "dataset": dataset,
        "split": split.summary(), "induced": INDUCED,
        "judges": [j for j in JUDGES if (predictions / f"{j}.jsonl").exists()], "floor_notes": floor_notes,
        "hybrid_program": str(hybrid_program) if (predictions / f"{HYBRID}.jsonl").exists() else None,
        "graded": any(t.reward is not None and 0.0 < t.reward < 1.0 for t in trajectories),
        "rubric": induction.judge.rubric, "beat_seed": induction.beat_seed,
        "sweep": induction.sweep, "program": str(program_path),
        "config": asdict(config),
        "batches": batches, "wall_time_s": round(time.time() - started, 1), "notes": notes,
        "phases": clock.phases,
    }
    (out_dir / "run.json").write_text(json.dumps(run, indent=2, default=str))
    write_report(out_dir, out_dir / "report.md")
    return out_dir


def _ablate(rubric: str, criteria: list[Criterion], test: list[Trajectory], ablation_dir: Path, judge_lm: dspy.BaseLM,
            config: ProtocolConfig, cache_dir: Path) -> None:
    """The induced judge with each criterion left out in turn, on the test split (``ablation/``)."""
    ablation_dir.mkdir(exist_ok=True)
    (ablation_dir / "criteria.json").write_text(json.dumps(
        [{"number": c.number, "name": c.name} for c in criteria], indent=2))
    for criterion in criteria:
        reduced = TrajectoryJudge(without_criterion(rubric, criterion.number), render_config=config.render)
        _judge_llm(reduced, test, ablation_dir / f"{criterion.number}_{_slug(criterion.name)}.jsonl",
                   judge_lm, config, cache_dir)
