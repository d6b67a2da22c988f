"""`rubricforge judge --ray [ADDRESS]`: the same judging, on a Ray cluster (`rubricforge_dspy.apply.ray`).

ADDRESS is optional: absent, a local Ray instance is started (``ray.init()``); ``auto`` joins the cluster
this node belongs to; ``ray://head:10001`` connects through Ray Client. ``--api-base`` may be repeated:
the endpoints are used round-robin. Every other judge option keeps its meaning (``--concurrency`` is
the calls in flight per Ray worker; the verdict cache is not used for a program on Ray: a re-run resumes from the
output instead). With ``--cascade`` the run goes through the one job runner (verdict cache included), each LLM
stage's calls on Ray, a stage without an LM on the driver.
"""

from __future__ import annotations

import argparse
import itertools
import sys

from rubricforge_dspy.cli.lm_options import api_bases
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.data.spec import DataSpec

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


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray Data: pip install 'rubricforge-dspy[ray]'") from None
    return ray


def run_ray_judge(args: argparse.Namespace, spec: DataSpec, preset, render, report, join, tally, judge=None,
                  common=None):
    """Judge ``spec``'s data into ``args.out`` on Ray; the `BatchSummary`. The whole input is checked (ids,
    records) before the first LM call, as locally (`apply.job.checked_input`). A cascade (`judge`, with the
    `run_judge_file` arguments `common`) goes through the one job runner, its LLM stages' calls on Ray
    (`apply.ray.RayCalls`)."""
    from rubricforge_dspy.judge.cascade import Cascade

    ray = _ray()
    if isinstance(judge, Cascade):
        return _run_ray_cascade(ray, args, spec, preset, judge, common)
    from rubricforge_dspy.apply import ray as on_ray
    from rubricforge_dspy.apply.job import checked_input, output_lock
    from rubricforge_dspy.cli.lm_options import lm_config
    from rubricforge_dspy.data.formats import iter_trajectories

    if args.ray_workers < 1:
        raise InputError(f"--ray-workers must be >= 1, got {args.ray_workers}")
    config = lm_config(args, "judge")
    bases = api_bases(args) or ([config.api_base] if config.api_base else [])
    paths = list(spec.paths)
    with output_lock(args.out):
        scan, data = checked_input(paths, **spec.read_options(), limit=spec.limit, labels=join)
        stream = iter_trajectories(paths, **spec.read_options(), report=report)
        if spec.limit is not None:
            stream = itertools.islice(stream, spec.limit)
        if join is not None:
            stream = (join.apply(t) for t in stream)
        stream = (tally.add(t) or t for t in stream)
        _start(ray, args)
        print(f"judge LM: {config.describe()} x {len(bases)} endpoint(s) on Ray "
              f"({ray.cluster_resources().get('CPU', 0):g} CPUs): {args.ray_workers} workers x "
              f"concurrency {preset.concurrency}", file=sys.stderr)
        dataset = on_ray.trajectory_dataset(stream)
        return on_ray.judge_dataset(dataset, judge, out=args.out, lm_config=config, api_bases=bases,
                                    workers=args.ray_workers, concurrency=preset.concurrency,
                                    render_config=render, data=data, timeout=config.timeout,
                                    max_consecutive_lm_errors=args.max_consecutive_errors or None,
                                    total=scan.selected)


def _start(ray, args: argparse.Namespace) -> None:
    if not ray.is_initialized():
        ray.init(address=None if args.ray == LOCAL else args.ray, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)


def _run_ray_cascade(ray, args: argparse.Namespace, spec: DataSpec, preset, cascade, common: dict):
    """`judge --cascade --ray`: `run_judge_file` with each LLM stage's calls on Ray; the `CascadeRun`."""
    from rubricforge_dspy.apply.options import JobOptions
    from rubricforge_dspy.apply.ray import RayCalls
    from rubricforge_dspy.apply.stream import run_judge_file
    from rubricforge_dspy.cli.lm_options import lm_config

    if args.ray_workers < 1:
        raise InputError(f"--ray-workers must be >= 1, got {args.ray_workers}")
    limit = args.max_consecutive_errors or None
    calls = lm = None
    if cascade.predictors():  # a cascade of floors makes no LM call: it runs on the driver
        config = lm_config(args, "judge")
        bases = api_bases(args) or ([config.api_base] if config.api_base else [])
        calls = RayCalls(config, bases, JobOptions(concurrency=preset.concurrency, timeout=config.timeout,
                                                   max_consecutive_lm_errors=limit, progress=False),
                         workers=args.ray_workers)
        lm = calls.job_lm()
        _start(ray, args)
        print(f"judge LM: {config.describe()} x {len(bases)} endpoint(s) on Ray (the cascade's LLM stages): "
              f"{args.ray_workers} workers x concurrency {preset.concurrency}", file=sys.stderr)
    return run_judge_file(cascade, list(spec.paths), args.out, lm=lm, calls=calls, concurrency=preset.concurrency,
                          max_consecutive_lm_errors=limit, **common)
