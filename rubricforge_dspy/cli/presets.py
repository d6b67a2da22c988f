"""The command line's side of the presets (`rubricforge_dspy.core.presets`): flags, and the preset and
render a command's arguments resolve to.

Every command that judges (`demo`, `induce`, `judge`, `python -m evals.paper`) and `render` take
``--preset`` and ``--render-tokens``/``--step-chars`` (the judging ones ``--concurrency``, induction
``--num-threads`` too). Without ``--preset`` the preset follows the endpoint: ``embedded`` without
``--api-base`` and ``RUBRICFORGE_API_BASE``, else ``server``. `render` and `judge` resolve the render
with the same function (`judge_render`), so ``rubricforge render`` prints the text ``judge`` sends.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

from rubricforge_dspy.cli.lm_options import api_bases
from rubricforge_dspy.core.presets import EMBEDDED, PRESETS, SERVER, Preset, preset_for
from rubricforge_dspy.evidence.render import RenderConfig, render_with_overrides

API_BASE_ENV = "RUBRICFORGE_API_BASE"


def resolve(args: argparse.Namespace) -> Preset:
    """The preset for CLI `args`: ``--preset`` if given, else by ``--api-base`` or ``RUBRICFORGE_API_BASE``
    (`preset_for`), with the ``--concurrency``, ``--render-tokens``, ``--step-chars``, ``--num-threads`` and
    ``--budget`` overrides applied."""
    name = getattr(args, "preset", None)
    given = api_bases(args)
    api_base = (given[-1] if given else None) or os.environ.get(API_BASE_ENV) or None
    preset = PRESETS[name] if name else preset_for(api_base)
    overrides = {field: getattr(args, field) for field in ("concurrency", "render_tokens", "step_chars",
                                                           "num_threads", "budget")
                 if getattr(args, field, None) is not None}
    return replace(preset, **overrides)


def render_from_args(args: argparse.Namespace, preset: Preset, base: RenderConfig | None = None) -> RenderConfig:
    """The render a command uses: `base` (a frozen program's render) with only the ``--render-tokens`` /
    ``--step-chars`` given applied, or the (resolved) preset's render when there is no `base`."""
    if base is None:
        return RenderConfig.of(preset)
    return render_with_overrides(base, getattr(args, "render_tokens", None), getattr(args, "step_chars", None))


def overrides_render(args: argparse.Namespace) -> bool:
    """Whether ``--render-tokens`` or ``--step-chars`` was given."""
    return getattr(args, "render_tokens", None) is not None or getattr(args, "step_chars", None) is not None


def judge_render(args: argparse.Namespace, preset: Preset, program_render=None) -> RenderConfig | None:
    """The render `judge` (and `render`) use for `args`: the preset's without ``--program``; with one, the
    program's own render (None: "leave the program's"), or it with the ``--render-tokens``/``--step-chars``
    given. `program_render` is a callable returning the program's `RenderConfig` (called only when needed)."""
    if getattr(args, "program", None) is None:
        return RenderConfig.of(preset)
    if not overrides_render(args):
        return None
    return render_from_args(args, preset, program_render())


def add_preset_arguments(parser: argparse.ArgumentParser, induction: bool = False, judging: bool = True,
                         render_tokens_aliases: tuple[str, ...] = ()) -> None:
    """``--preset --concurrency --render-tokens --step-chars`` (``--num-threads`` for induction; no
    ``--concurrency`` when not `judging`, as for `render`; `render_tokens_aliases` are more names of
    ``--render-tokens``, e.g. `render`'s ``--max-tokens``)."""
    group = parser.add_argument_group("sizes (default: the embedded preset without --api-base, else the server preset)")
    group.add_argument("--preset", choices=sorted(PRESETS), default=None,
                       help="the sizes (render tokens, concurrency, GEPA budget; core/presets.py): embedded for the "
                            "small CPU model, server for a real one (default: by the endpoint)")
    if judging:
        group.add_argument("--concurrency", type=int, default=None,
                           help=f"judge requests in flight (embedded {EMBEDDED.concurrency}, "
                                f"server {SERVER.concurrency})")
    group.add_argument("--render-tokens", *render_tokens_aliases, dest="render_tokens", type=int, default=None,
                       help=f"token budget of each rendered trajectory (embedded {EMBEDDED.render_tokens}, "
                            f"server {SERVER.render_tokens})")
    group.add_argument("--step-chars", type=int, default=None,
                       help=f"characters a long step keeps at least when the render does not fit its token "
                            f"budget (steps are cut only then; embedded {EMBEDDED.step_chars}, "
                            f"server {SERVER.step_chars})")
    if induction:
        group.add_argument("--num-threads", type=int, default=None,
                           help=f"GEPA evaluation threads (embedded {EMBEDDED.num_threads}, "
                                f"server {SERVER.num_threads})")
