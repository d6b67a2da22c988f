"""``rubricforge stats``, ``convert`` and ``render``: the commands that read a trajectory file and print
or write what is in it (counts, the generic JSONL, the text the judge sees); no LM is called.

`rubricforge_dspy.cli.main` registers them in `build_parser`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rubricforge_dspy.cli.data_options import data_spec, load_data, stream_data
from rubricforge_dspy.cli.integrations import labelers_of, reads_from_mlflow, say_labelers
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.spec import DataSpec

__all__ = ["cmd_convert", "cmd_render", "cmd_stats"]


def _json_nan_as_null(value: Any) -> Any:
    """`value` with every float nan as None (JSON has no NaN; an undefined statistic is null)."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_nan_as_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_nan_as_null(v) for v in value]
    return value


@reads_from_mlflow
def cmd_stats(args: argparse.Namespace, spec: DataSpec, mlflow_labels: Any = None) -> int:
    """Counts of the input, read as a stream: memory holds per-task counters, never the trajectories
    (each record is checked as every loading command checks it, but no step is built). The labelers' agreement
    of a labels file with a labeler column, or of ``--from-mlflow``'s HUMAN sources (`mlflow_labels`)."""
    from rubricforge_dspy.data.stats import DataStats, format_labeler_report, labeler_report

    data = stream_data(spec, counts=True)
    stats = DataStats()
    for counts in data.trajectories:
        stats.add(counts)
    labelers = None
    if spec.labels_path is not None:
        from rubricforge_dspy.data.labels import read_label_file

        labelers = labeler_report(read_label_file(spec.labels_path))
    elif mlflow_labels is not None:
        labelers = labelers_of(mlflow_labels)
    if args.json:
        print(json.dumps({**stats.to_dict(data.report), "label_rules": dict(data.report.label_rules),
                          "warnings": data.tally.warnings(), "labels": data.to_dict(),
                          "labelers": _json_nan_as_null(labelers)}, indent=2))
    else:
        print(stats.format(data.report))
        if labelers is not None:
            print("\n".join(format_labeler_report(labelers)))
    return 0


@reads_from_mlflow
def cmd_convert(args: argparse.Namespace, spec: DataSpec, mlflow_labels: Any = None) -> int:
    from rubricforge_dspy.data.export import convert_trajectories

    say_labelers(mlflow_labels, sys.stderr)  # --from-mlflow: several people's agreement, as every pull says it

    data = stream_data(spec)  # written as read: bounded memory for a file of any length
    n = convert_trajectories(data.trajectories, args.out)
    print(f"wrote {n} trajectories ({data.tally.labeled} labeled, {data.tally.unlabeled} unlabeled) -> {args.out}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    """Print the text `judge` sends for the chosen item(s): the render is resolved as `judge` resolves it
    (``--preset``, ``--render-tokens``/``--max-tokens``, ``--step-chars``, ``--api-base`` or
    ``RUBRICFORGE_API_BASE``, ``--program``'s own render); which one it used goes to stderr."""
    from rubricforge_dspy.cli.presets import judge_render, resolve
    from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory

    spec = data_spec(args)
    if args.all:
        trajectories = load_data(spec, warn=False, command="render").trajectories
    elif spec.session_key is not None:  # one session: grouped from the whole input (labels joined per session)
        grouped = load_data(spec, warn=False, command="render").trajectories
        chosen_one, count = (grouped[args.index] if 0 <= args.index < len(grouped) else None), len(grouped)
    else:  # one record: those before it are skipped without being parsed (data.formats.trajectory_at)
        from rubricforge_dspy.data.formats import trajectory_at
        from rubricforge_dspy.data.scan import require_trajectories

        chosen_one, count = trajectory_at(list(spec.paths), max(args.index, 0), **spec.read_options())
        require_trajectories(count, list(spec.paths))
        if spec.labels_path is not None and chosen_one is not None:
            from rubricforge_dspy.data.labels import LabelJoin

            chosen_one = LabelJoin(spec.labels_path, spec.label_rule).apply(chosen_one)
    preset = resolve(args)
    program = None
    if args.program is not None:
        from rubricforge_dspy.judge.loading import load_judge

        program = load_judge(args.program, check_certificate=False, allow_unverified=args.allow_unverified_program)

    def program_render() -> RenderConfig | None:
        own: RenderConfig | None = program.render_config if program is not None else None  # only with --program
        return own

    config = judge_render(args, preset, program_render)
    if program is None:
        source = f"preset {preset.name}"
    elif config is None:
        config, source = program.render_config, f"{args.program}'s own render"
    else:
        source = f"{args.program}'s render with the sizes given"
    config = config or RenderConfig()  # a judge without a render of its own: render_trajectory's default
    print(f"render: {source}: {config.max_tokens} tokens, step chars {config.max_step_chars}", file=sys.stderr)
    if args.all:
        chosen = list(enumerate(trajectories))
    else:
        if args.index < 0 or chosen_one is None:
            raise InputError(f"--index {args.index} out of range (0..{count - 1})")
        chosen = [(args.index, chosen_one)]
    for i, t in chosen:
        if args.all:
            print(f"===== {i}: {t.id} =====")
        print(render_trajectory(t, config))
    return 0
