"""`rubricforge demo`: the main job on bundled tau-bench data, sized for the embedded CPU model.

Samples a few airline tasks (one trial each) from the tau-bench authors' GPT-4o run, splits them
by task, induces a rubric with a small GEPA budget, freezes it, judges the held-out tasks with the
induced judge and every baseline, fits a certified cascade (the floor, then the induced judge, then a
person; `demo_cascade`) on the held-out tasks, and writes the report, led by the cascade, into the
directory given (``--out``; default `default_out_dir`, outside any source tree; the committed example run
is ``artifacts/demo/``). With --api-base/--model the same command runs against a real model (use larger
--tasks/--budget there).
"""

from __future__ import annotations

import json
import logging
import math
import os
from contextlib import nullcontext
from importlib import resources
from pathlib import Path
from typing import Any

import dspy

from rubricforge_dspy.core.presets import Preset
from rubricforge_dspy.core.sizes import sizes_explained
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory, labeled_only
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.labels import join_labels
from rubricforge_dspy.data.scan import require_trajectories
from rubricforge_dspy.data.split import sample_by_task, split_by_task
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.induction.search import MIN_VAL_ITEMS, InductionConfig
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.pipeline.demo_cascade import fit_demo_cascade
from rubricforge_dspy.pipeline.phases import PhaseClock
from rubricforge_dspy.pipeline.protocol import ProtocolConfig, run_protocol
from rubricforge_dspy.report import write_report

logger = logging.getLogger(__name__)

# Trial 0 of each task of the tau-bench GPT-4o airline run, shipped in the package
# (see DEMO_DATA.md beside this module).
DEMO_DATA = Path(str(resources.files("rubricforge_dspy.pipeline").joinpath("demo-gpt-4o-airline.json")))
EMBEDDED_REFLECTION_TOKENS = 800

SMALL_MODEL_NOTE = """\
How to read these numbers: the judge here is the embedded SmolLM2-135M-Instruct, a 135M-parameter model
running on CPU. It exercises the whole pipeline for real (rendering, structured verdicts, GEPA reflection,
freezing, reporting) but it is far too small to be a useful judge: expect near-chance agreement, verdicts
that barely depend on the rubric, and an induced rubric that rarely beats the seed. Read the false-pass
column first. For meaningful numbers, point the same command at a real model, e.g.
  rubricforge demo --api-base http://127.0.0.1:30000/v1 --model Qwen2.5-7B-Instruct@main --tasks 50 --budget 200"""


def default_out_dir() -> Path:
    """Where the demo writes when no directory is named: ``$XDG_CACHE_HOME/rubricforge/demo`` (default
    ``~/.cache/rubricforge/demo``), outside any source tree."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rubricforge" / "demo"


def demo_sample(data: str | Path | None = None, n_tasks: int = 10, *, labels: str | Path | None = None,
                label_threshold: float | str | LabelRule | None = None) -> tuple[list[Trajectory], Path]:
    """One trial of `n_tasks` seeded-random tasks of the labeled trajectories in `data` (default: the
    bundled GPT-4o airline sample), with `labels` joined by id (the join's summary is logged); unlabeled
    ones are left out (a logged warning with their count). Returns the sample and the data file."""
    data = Path(data) if data else DEMO_DATA
    if not data.exists():
        raise FileNotFoundError(f"demo data not found at {data}; give a tau-bench results file (data=; "
                                "command line: --data)")
    loaded = load_trajectories(data, label_threshold=label_threshold)
    require_trajectories(len(loaded), data, loaded.report)  # an empty file is named (exit 2)
    trajectories: list[Trajectory] = list(loaded)
    if labels:
        joined = join_labels(loaded, labels, label_threshold)
        logger.info("%s", joined.report.summary())
        trajectories = list(joined)
    unlabeled = [t.id for t in trajectories if t.label is None]
    if unlabeled:
        logger.warning("%d unlabeled trajectories left out (e.g. %s)", len(unlabeled), unlabeled[0])
        trajectories = list(labeled_only(trajectories))
    return sample_by_task(trajectories, n_tasks), data


def sizes_note(sample: list[Trajectory], config: ProtocolConfig) -> str:
    """One plain line on what the demo's sizes are for and what they leave out ("" when they leave out
    nothing): said once, instead of a warning from every step the sizes skip or make noisy (those are
    then logged at INFO, `core.sizes`; the line is also the report's first note, and each step's own note
    stays in the manifest and the report)."""
    split = split_by_task(sample, config.fractions, config.induction.seed)

    def one_class(part: list[Trajectory]) -> bool:
        return len({t.label for t in part}) < 2

    left_out = []
    if len(split.val) < MIN_VAL_ITEMS:
        left_out.append(f"choosing among candidate rubrics on {len(split.val)} validation item(s) is mostly noise")
    if one_class(split.val):
        left_out.append("the validation split holds one outcome, so no calibration and no hybrid judge are fit")
    if one_class(split.train):
        left_out.append("the training split holds one outcome, so no symptom floor is fit")
    if one_class(split.test):
        left_out.append("the test split holds one outcome, so the induced judge is not certified")
    if not left_out:
        return ""
    enough = math.ceil(MIN_VAL_ITEMS / config.fractions[1]) if config.fractions[1] else None
    more = (f" and at least {enough} labeled tasks (--tasks, and --data when the file holds fewer), so that "
            f"validation holds {MIN_VAL_ITEMS} items") if enough else ""
    return (f"demo sizes: {len(sample)} tasks ({len(split.train)} train, {len(split.val)} validation, "
            f"{len(split.test)} test), GEPA budget {config.induction.budget}: a quick run of the whole pipeline, not a "
            f"measurement. At these sizes {'; '.join(left_out)}. For numbers that mean something, use a real "
            f"model (--api-base/--model){more}.")


def demo_header(sample: list[Trajectory], preset: Preset, *, judge_lm: dspy.LM, reflection_lm: dspy.LM,
                data_name: str = DEMO_DATA.name) -> str:
    """What a person running the demo is told before it starts: the LMs, the data and the sizes of
    `preset`, and (when they are too small for some step) once what the sizes are for (`sizes_note`)."""
    lines = [f"judge LM: {lm_name(judge_lm)}", f"reflection LM: {lm_name(reflection_lm)}",
             f"data: {data_name}, {len(sample)} tasks x 1 trial; preset {preset.name}: GEPA budget "
             f"{preset.budget}, concurrency {preset.concurrency}, render {preset.render_tokens} tokens"]
    note = sizes_note(sample, protocol_config(preset))
    return "\n".join([*lines, note] if note else lines)


def run_demo(sample: list[Trajectory], out: str | Path, *, judge_lm: dspy.LM, reflection_lm: dspy.LM,
             preset: Preset, data_name: str = DEMO_DATA.name, program: str | Path | None = None,
             resume: bool = False) -> tuple[Path, Path]:
    """Run the protocol on the demo `sample` into the directory `out` (nothing is written elsewhere) and
    freeze the induced judge at `program` (default ``OUT/induced.json``), with the sizes of `preset`.
    When the sizes are too small for some step, what they are for is said once (`sizes_note`: the
    report's first note; `demo_header` is the text for a person, which `rubricforge demo` prints) and
    those steps then do not warn. Returns (the run directory holding report.md, the program)."""
    out = Path(out)
    program = Path(program) if program else out / "induced.json"
    embedded = preset.name == "embedded"
    judge_name, ref_name = lm_name(judge_lm), lm_name(reflection_lm)
    config = protocol_config(preset)
    note = sizes_note(sample, config)
    logger.debug("demo: %d tasks, preset %s; %s", len(sample), preset.name, note or "sizes leave nothing out")
    # the embedded model's caveat is the report's opening (run.json's ``embedded``: `report.judges.caveat_section`),
    # not a note among the facts
    notes = note
    clock = PhaseClock()
    with sizes_explained(note) if note else nullcontext():
        run_dir = run_protocol(sample, out, judge_lm=judge_lm, reflection_lm=reflection_lm,
                               judge_lm_name=judge_name, reflection_lm_name=ref_name, program_path=program,
                               dataset=f"tau-bench airline, GPT-4o run ({len(sample)} tasks)", config=config,
                               resume=resume, notes=notes, clock=clock)
    # the report leads with the cascade: decided for free, to the LLM, to a person (or why nothing is certified);
    # written again with the fit, as `rubricforge report --predictions RUN/` writes it
    with clock.phase("cascade fit"):
        fit_demo_cascade(sample, config.fractions, config.induction.seed, program, judge_lm, run_dir, embedded)
    with clock.phase("report"):
        write_report(run_dir, run_dir / "report.md")
    _record_phases(run_dir, clock, embedded)  # every phase, the demo's own too, and the report again with them
    write_report(run_dir, run_dir / "report.md")
    return run_dir, program


def _record_phases(run_dir: Path, clock: PhaseClock, embedded: bool) -> None:
    """run.json's ``phases`` (and their totals): the protocol's and the demo's; and ``embedded`` (the judge LM is
    the embedded model: the report opens with what it can and cannot tell)."""
    path = run_dir / "run.json"
    run = json.loads(path.read_text(encoding="utf-8"))
    run["phases"], run["phases_total"] = clock.phases, clock.totals()
    run["embedded"] = embedded
    path.write_text(json.dumps(run, indent=2, default=str), encoding="utf-8")


def protocol_config(preset: Preset, **overrides: Any) -> ProtocolConfig:
    """The protocol's sizes from a `rubricforge_dspy.core.presets.Preset`; `overrides` are other
    `ProtocolConfig` fields."""
    induction = InductionConfig(budget=preset.budget, minibatch=preset.minibatch,
                                max_rubric_chars=preset.max_rubric_chars, num_threads=preset.num_threads)
    # the embedded 135M model checks the plumbing: judging the test split once more per criterion (the ablation)
    # would be about 40% of the demo's CPU for numbers at chance (run.json's phases); a server model runs it
    overrides.setdefault("ablation", preset.name != "embedded")
    return ProtocolConfig(induction=induction, render=RenderConfig.of(preset), demo_max_tokens=preset.demo_max_tokens,
                          concurrency=preset.concurrency, **overrides)
