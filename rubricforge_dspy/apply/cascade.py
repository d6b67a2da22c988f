"""Judge trajectories with a certified cascade (`judge.cascade.Cascade`): `run_cascade`, the Python side of
``rubricforge judge --cascade`` on a list of trajectories (the command line judges a file through
`apply.stream.run_judge_file`, the same runner).

A cascade is a judge the one job runner (`apply.stream`) runs stage by stage, streamed (`JobRun.streams`): a
later (LLM) stage is called only on what the earlier ones left, so a trajectory the floor decides costs no LM
request. Everything else is the plain run's: `JobOptions`, the output's lock (`apply.job.output_lock`), the job
claimed first (``OUT.job.json``, whose judge fingerprint covers the cascade's stages, thresholds, LM and the
cascade file's sha256, and whose data fingerprint covers the input), the crash-safe writer (each line written as
soon as a stage settles its item), resume after any kill (ids in the file are not judged again; an LM-error
abstention is asked again, from the first stage), the verdict cache (each LLM stage's calls keyed by the stage's
own fingerprint and input: a re-run into a new output asks the LM nothing it answered before), and the back ends
(`apply.ray.RayCalls`, `apply.openai_batch.BatchCalls`: an LLM stage's calls on Ray or through the Batch API; a
stage without an LM runs locally).

Each verdict line is the contract's (`core.verdict.verdict_line`) plus ``stage`` (the deciding stage's name,
``"escalated"``, or the stage whose LM failed), ``stage_index`` (None when escalated), ``lm_stages_run`` (the LLM
stages whose LM was called for the item: its LM requests before retries; 0 for a floor-decided or cache-answered
one) and ``lm_tokens`` (per LLM stage called, the prompt and completion tokens its LM reported; ``{}`` without);
an escalated line (an abstention of kind ``"escalated"``) also carries ``escalated_by`` and
``escalation_confidence``: the last stage that handed it on with a confidence, and that confidence (also its
``score_calibrated``; None when no stage gave one), by which a person's queue takes the nearest first.
The escalated items are written as a labeling queue: generic JSONL (docs/FORMAT.md), ``label`` and
``reward`` null, beside the verdicts (``OUT.escalated.jsonl``) unless told where; it is rebuilt from the
verdict file at the end of every run (also one stopped by an LM failure), so it always lists every
escalated line of the file, and a resumed run counts them all (``escalated_in_file``). Each run's LM spend
(requests, tokens of every call, how it ended), the cascade's stages, LLM stages and guarantee, and the cascade
and data files are appended to ``cascade_runs`` in ``OUT.job.json`` (the report reads them). A cascade without
an LLM stage resolves no LM: none is needed, and a configured one is not part of its job.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rubricforge_dspy.apply.cascade_job import (
    RUNS_KEY,
    CascadeJob,
    CascadeRun,
    cascade_fingerprint,
    check_outputs,
    count_escalated,
    escalated_path,
)
from rubricforge_dspy.apply.job import output_lock
from rubricforge_dspy.apply.options import JobOptions, job_options
from rubricforge_dspy.apply.stream import run_job
from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory

if TYPE_CHECKING:
    import dspy

    from rubricforge_dspy.judge.cascade import Cascade

__all__ = ["CascadeRun", "run_cascade", "escalated_path", "check_outputs", "cascade_fingerprint", "count_escalated",
           "RUNS_KEY"]

_CASCADE_OPTIONS = JobOptions(progress=False)  # the Python API: no bar, no verdict cache unless asked


def run_cascade(cascade: Cascade, trajectories: Sequence[Trajectory], out_path: PathArg,
                options: JobOptions | None = None, *, escalated_out: PathArg | None = None,
                lm: dspy.BaseLM | None = None, data: str | None = None, cascade_file: PathArg | None = None,
                data_files: Sequence[PathArg] | None = None, calls: Any = None, chunk: int | None = None,
                **overrides: Any) -> CascadeRun:
    """Judge `trajectories` with `cascade` into the verdict JSONL `out_path` and the labeling queue; resumable.

    Args:
        cascade: the cascade (`judge.loading.load_judge` of a cascade file).
        trajectories: the trajectories (labels, when present, are written into the lines, never shown); ids
            must differ (``on_duplicate``).
        out_path: the verdict file; an existing one of the same job is resumed (see the module docstring).
        options: how the job runs (`JobOptions`; default ``JobOptions(progress=False)``: no verdict cache).
            ``concurrency`` is the calls in flight in each stage; ``max_consecutive_lm_errors`` is per LLM
            stage (None: never stop).
        escalated_out: the labeling queue (default `escalated_path`); rebuilt at the end of each run.
        lm: the LM of the LLM stages (default: theirs, else `dspy.settings.lm`); a cascade without an LLM
            stage needs none and resolves none.
        data: the input's fingerprint (`apply.job.files_fingerprint`), recorded in ``OUT.job.json``; a resume
            on other data is refused.
        cascade_file: the file the cascade was loaded from; its sha256 is part of the job's fingerprint.
        data_files: the input files, recorded with the run (the report's title names them).
        calls: how an LLM stage's calls are made (default: on this machine; `apply.ray.RayCalls`,
            `apply.openai_batch.BatchCalls`).
        chunk: items per chunk (default `apply.runner.CASCADE_CHUNK`).
        **overrides: `JobOptions` fields (``concurrency=8``, ``cache=True``).

    Returns:
        The `CascadeRun` (with ``verdicts`` of this run's items in input order when it completed).

    Raises:
        InputError: the queue is not the job's, two items share an id, a bad option.
        BatchOutputError: `out_path` belongs to another job (another cascade, LM or data).
        OutputLockedError: another process is writing `out_path`.
        JudgeUnavailableError: an LLM stage's circuit opened; every line settled so far is kept in `out_path`
            (the message says how many), the queue and the run's record are written; run again to resume.
    """
    options = job_options(options, overrides, _CASCADE_OPTIONS)
    options.check()
    with output_lock(out_path):
        job = CascadeJob(cascade, out_path, escalated_out=escalated_out, cascade_file=cascade_file,
                         data_files=data_files, reread=lambda: trajectories, keep_verdicts=True)
        run = run_job(cascade, trajectories, Path(job.out_path), options, lm=lm, data=data, calls=calls, cascade=job,
                      chunk=chunk)
    if not isinstance(run, CascadeRun):  # the runner's summary of a cascade's job (`CascadeJob.summary`)
        raise RubricForgeError("a cascade's run is summed up as a CascadeRun")
    return run
