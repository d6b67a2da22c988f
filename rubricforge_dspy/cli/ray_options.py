"""`rubricforge judge --ray [ADDRESS]`: the same judging, on a Ray cluster (`rubricforge_dspy.apply.ray`).

ADDRESS is optional: absent, a local Ray instance is started (``ray.init()``); ``auto`` joins the cluster
this node belongs to; ``ray://head:10001`` connects through Ray Client. ``--api-base`` may be repeated:
the endpoints are used round-robin. Every other judge option keeps its meaning (``--concurrency`` is
the calls in flight per Ray worker). A program or a cascade runs through the one job runner (the input checked and
spilled once, the verdict cache, resume, the writer), each LLM stage's calls on Ray, a stage without an LM on the
driver.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rubricforge_dspy.cli.lm_options import api_bases
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.spec import DataSpec

if TYPE_CHECKING:
    from typing import Any

    from rubricforge_dspy.core.presets import Preset
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.cascade import Cascade
    from rubricforge_dspy.judge.contract import BaseJudge

__all__ = ["add_ray_arguments", "check_endpoints", "run_ray_judge", "LOCAL"]

LOCAL = "local"


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--ray [ADDRESS]`` and ``--ray-workers``."""
    group = parser.add_argument_group("Ray (pip install 'rubricforge-dspy[ray]'; docs/SERVING.md)")
    group.add_argument("--ray", nargs="?", const=LOCAL, default=None, metavar="ADDRESS",
                       help="judge on Ray Data: no ADDRESS starts a local Ray instance; 'auto' joins this node's "
                            "cluster; ray://HOST:PORT connects through Ray Client. Repeat --api-base for round-robin")
    group.add_argument("--ray-workers", type=int, default=2,
                       help="--ray: Ray workers (actors) judging at once, each with --concurrency calls in flight")


def check_endpoints(args: argparse.Namespace) -> None:
    """Refuse several ``--api-base`` without ``--ray`` (one endpoint per local run: put a gateway in front)."""
    bases = api_bases(args) or []
    if len(bases) > 1 and getattr(args, "ray", None) is None:
        raise InputError(f"--api-base given {len(bases)} times: several endpoints are used round-robin with "
                         "--ray only; locally, give one endpoint (e.g. the SGLang Model Gateway in front of the "
                         "servers, docs/SERVING.md)")
    if getattr(args, "ray", None) is not None and getattr(args, "batch_api", False):
        raise InputError("--ray and --batch-api are two ways to judge a file: choose one")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray Data: pip install 'rubricforge-dspy[ray]'") from None
    return ray


def run_ray_judge(args: argparse.Namespace, spec: DataSpec, preset: Preset, judge: BaseJudge | Cascade | None,
                  render: RenderConfig | None, common: dict[str, Any]) -> Any:
    """Judge ``spec``'s data into ``args.out`` on Ray, a plain program or a cascade (`judge`), through the one job
    runner (`apply.stream.run_judge_file` with ``calls=RayCalls(...)``, the `run_judge_file` arguments `common`):
    the input checked, labels joined and tallied before the first LM call, each LLM stage's calls on Ray
    (`apply.ray.RayCalls`), a stage without an LM on the driver; the `BatchSummary` (a `CascadeRun`)."""
    from rubricforge_dspy.apply.options import JobOptions
    from rubricforge_dspy.apply.ray import RayCalls
    from rubricforge_dspy.apply.stream import run_judge_file
    from rubricforge_dspy.cli.lm_options import lm_config

    ray = _ray()
    if args.ray_workers < 1:
        raise InputError(f"--ray-workers must be >= 1, got {args.ray_workers}")
    limit = args.max_consecutive_errors or None
    calls = lm = None
    if judge is None or judge.predictors():  # a cascade of floors makes no LM call: it runs on the driver
        config = lm_config(args, "judge")
        bases = api_bases(args) or ([config.api_base] if config.api_base else [])
        calls = RayCalls(config, bases, JobOptions(concurrency=preset.concurrency, timeout=config.timeout,
                                                   max_consecutive_lm_errors=limit, progress=False),
                         workers=args.ray_workers)
        lm = calls.job_lm()
        _start(ray, args)
        stages = " (the cascade's LLM stages)" if _is_cascade(judge) else ""
        print(f"judge LM: {config.describe()} x {len(bases)} endpoint(s) on Ray{stages} "
              f"({ray.cluster_resources().get('CPU', 0):g} CPUs): {args.ray_workers} workers x "
              f"concurrency {preset.concurrency}", file=sys.stderr)
    return run_judge_file(judge, list(spec.paths), args.out, lm=lm, calls=calls, render_config=render,
                          concurrency=preset.concurrency, max_consecutive_lm_errors=limit, **common)


def _is_cascade(judge: object) -> bool:
    from rubricforge_dspy.judge.cascade import Cascade

    return isinstance(judge, Cascade)


def _start(ray: Any, args: argparse.Namespace) -> None:
    if not ray.is_initialized():
        ray.init(address=None if args.ray == LOCAL else args.ray, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
