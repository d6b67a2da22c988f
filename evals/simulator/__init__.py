"""A GPU-like **simulated** judge server for benchmarks and tests (never a default of any command).

- `model`: the performance model (continuous batching, prefix cache) and virtual-time runs;
- `judging`: deterministic, rubric-dependent simulated verdicts and reflection rewrites;
- `server`: the OpenAI-compatible HTTP server (`SimServer`), with fault injection.

See evals/simulator/README.md for the parameters and where they come from.
"""

from evals.simulator.model import Engine, GpuModel, Router, SimRequest, run_all_queued, run_closed_loop
from evals.simulator.server import DEFAULT_MODEL_NAME, FaultPlan, SimServer

__all__ = ["Engine", "GpuModel", "Router", "SimRequest", "run_all_queued", "run_closed_loop",
           "DEFAULT_MODEL_NAME", "FaultPlan", "SimServer"]
