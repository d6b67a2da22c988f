"""Presets: the one place for the sizes that depend on where the judge runs, and the library's defaults.

- ``embedded``: SmolLM2-135M on llama.cpp, 2 CPU cores, a 2k-token context. Short renders, one request
  in flight (the server runs one at a time), a GEPA budget that finishes in minutes. Plumbing, not a judge.
- ``server``: a GPU judge behind an OpenAI-compatible server (SGLang, vLLM) that batches requests: a
  render budget that fits the shipped tau-bench episodes (22k estimated tokens, never fewer
  than SmolLM2's count on the measured data, for a 32k-context judge; the longest shipped episode
  estimates at 21.0k, 11.5k SmolLM2 tokens; see evals/RESULTS.md for how many each preset cuts), 64
  requests in flight, 32 GEPA evaluation threads,
  and the paper's budget (200 metric calls, minibatch 4).

The command line picks a preset by where the judge runs: `preset_for(api_base)` gives ``embedded`` when
no endpoint is configured, else ``server`` (`rubricforge_dspy.cli.presets.resolve` adds ``--preset`` and
the ``--concurrency``, ``--render-tokens``, ``--step-chars``, ``--num-threads`` and ``--budget`` overrides).

The library's own default, `LIBRARY`, is what a Python caller gets without naming sizes: a bare
`RenderConfig()` / `TrajectoryJudge()`, `InductionConfig()` and `ProtocolConfig()`. It has the ``server``
preset's render and GEPA sizes, so `TrajectoryJudge().render(t)` is exactly the text
``rubricforge judge --preset server`` (or ``judge`` with an endpoint) sends. Why ``server``: a Python
caller judges with a real LM it configured itself (`dspy.LM`, an endpoint, a hosted API); the embedded
preset exists for the 135M plumbing model the CLI starts when no endpoint is given, and its 900-token
render elides most of a tau-bench episode, which a real judge must read. `LIBRARY` differs from
``server`` in one respect only: one judge request and one GEPA thread at a time
(``concurrency=1``, ``num_threads=1``), because the library cannot know how many concurrent requests the
caller's endpoint or API key accepts; pass ``concurrency``/``num_threads`` (e.g. ``SERVER.concurrency``)
to go parallel. (Before this module, a bare `RenderConfig()` was 1800 estimated tokens and 700 step
characters, sizes no command used: `rubricforge render` showed a text the judge never sent.)

This module imports nothing of the package, so `evidence`, `induction` and `pipeline` derive their
defaults from it; the `RenderConfig` of a preset is `rubricforge_dspy.evidence.render.RenderConfig.of`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Preset:
    """The sizes of one place to run the judge.

    Attributes:
        name: ``embedded``, ``server`` or ``library``.
        render_tokens: estimated-token budget of each rendered trajectory (`RenderConfig.max_tokens`).
        step_chars: characters a long step keeps at least before whole steps are elided
            (`RenderConfig.max_step_chars`).
        concurrency: judge requests in flight (batch judging, the protocol).
        num_threads: GEPA evaluation threads (induction).
        budget: GEPA metric calls.
        minibatch: GEPA reflection minibatch size.
        demo_tasks: tasks the demo samples.
        demo_max_tokens: FewShot demos rendered with this smaller budget (small contexts); None: the render's.
        max_rubric_chars: longest rubric GEPA may propose.
    """

    name: str
    render_tokens: int
    step_chars: int
    concurrency: int
    num_threads: int
    budget: int
    minibatch: int
    demo_tasks: int
    demo_max_tokens: int | None
    max_rubric_chars: int


EMBEDDED = Preset("embedded", render_tokens=900, step_chars=300, concurrency=1, num_threads=1, budget=6,
                  minibatch=2, demo_tasks=10, demo_max_tokens=250, max_rubric_chars=2500)
SERVER = Preset("server", render_tokens=22000, step_chars=6000, concurrency=64, num_threads=32, budget=200,
                minibatch=4, demo_tasks=50, demo_max_tokens=None, max_rubric_chars=3000)
PRESETS = {p.name: p for p in (EMBEDDED, SERVER)}
# The library's default (module docstring): the server preset's sizes, one request at a time.
LIBRARY = replace(SERVER, name="library", concurrency=1, num_threads=1)

# The dead-server circuit breaker's limits (`rubricforge_dspy.lm.circuit.LMCircuit`): LM calls failed in a row
# before a run stops. Batch judging counts a verdict whose call failed after its retries (``rubricforge judge
# --max-consecutive-errors``); induction counts each of GEPA's judge calls, made without retries.
JUDGING_MAX_CONSECUTIVE_LM_ERRORS = 20
INDUCTION_MAX_CONSECUTIVE_LM_ERRORS = 3


def preset_for(api_base: str | None) -> Preset:
    """The command line's rule: ``embedded`` without an endpoint, ``server`` with one.

    Args:
        api_base: the judge's OpenAI-compatible root URL, or None (no endpoint configured).

    Returns:
        `EMBEDDED` or `SERVER`.
    """
    return EMBEDDED if api_base is None else SERVER
