"""``--read {budget,segments,explore}``: how the judge reads a long episode (docs/LONG_EPISODES.md), one
definition for `judge` and `induce`.

``budget`` (the default) is today's judge: one render fitted to the token budget (long steps clipped, then
middle steps elided). ``segments`` makes a `judge.segments.SegmentsJudge` and ``explore`` a
`judge.explorer.ExplorerJudge` from the program's rubric and render configuration: the rubric becomes their
instruction (so `induce` evolves it), the render's token budget the size of each of their calls."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rubricforge_dspy.core.errors import InputError

if TYPE_CHECKING:
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.contract import BaseJudge

__all__ = ["READ_MODES", "add_read_argument", "reading_judge"]

READ_MODES = ("budget", "segments", "explore")


def add_read_argument(parser: argparse._ActionsContainer) -> None:
    """The ``--read`` option (default ``budget``)."""
    parser.add_argument("--read", choices=READ_MODES, default="budget",
                        help="how the judge reads an episode: budget (one render fitted to the render budget; long "
                             "episodes are clipped and their middle steps elided), segments (every step, in "
                             "windows of the render budget, one LM call each, then a verdict call), explore (an LM "
                             "with read-only tools over the steps, within caps); see docs/LONG_EPISODES.md")


def reading_judge(judge: BaseJudge | None, mode: str, render: RenderConfig | None, where: str) -> BaseJudge | None:
    """The judge that reads as `mode` says, made from `judge` (None: the seed rubric) and the render the run uses
    (`render`; None: the program's own).

    ``budget`` returns `judge` unchanged. ``segments``/``explore`` return a new judge whose instruction is the
    program's rubric and whose render configuration is `render` (or the program's).

    Raises:
        InputError: `mode` is unknown; or `judge` is not a plain LLM judge (a cascade, a floor, a hybrid stack, a
            recorded or Python stage) or is calibrated (its calibration map and pass threshold were fit on the
            budgeted judge's scores: they do not carry over to another reading; use the uncalibrated program, or
            re-fit the operating point on the new judge). `where` names the program in the message.
    """
    if mode not in READ_MODES:
        raise InputError(f"--read must be one of {', '.join(READ_MODES)}, got {mode!r}")
    if mode == "budget":
        return judge
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.explorer import ExplorerJudge
    from rubricforge_dspy.judge.hybrid import HybridJudge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge.segments import SegmentsJudge

    if judge is None:
        judge = TrajectoryJudge()
    if isinstance(judge, (SegmentsJudge, ExplorerJudge)):
        wanted = SegmentsJudge if mode == "segments" else ExplorerJudge
        if not isinstance(judge, wanted):
            raise InputError(f"{where} is a {judge.read_mode} judge: it cannot read with --read {mode} (give its "
                             f"budgeted program, or --read {judge.read_mode})")
        if render is not None:
            judge.render_config = render
        return judge
    if isinstance(judge, HybridJudge) or type(judge) is not TrajectoryJudge:
        raise InputError(f"{where} is a {type(judge).__name__}, not a single LLM judge: --read {mode} makes a new "
                         "judge from one program's rubric (for a cascade, save the segments or explorer judge as a "
                         "stage of its own)")
    if judge.operating_point() is not None:
        raise InputError(f"{where} is calibrated: its calibration map and pass threshold were fit on the scores of "
                         f"the budgeted judge and do not carry over to --read {mode}, whose scores differ; give the "
                         "program before `fit-threshold`/calibration, or judge with --read budget")
    config = render or judge.render_config or RenderConfig()
    made: BaseJudge = (SegmentsJudge if mode == "segments" else ExplorerJudge)(judge.rubric, render_config=config)
    return made
