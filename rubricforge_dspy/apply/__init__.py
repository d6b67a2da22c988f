"""Apply: a frozen judge run over files or streams of trajectories, resumably, into verdict files.

In: a judge (or a program file), trajectories (an iterable or data files), an LM. Out: an append-only
JSONL of verdict lines (`rubricforge_dspy.core.verdict`), one job per output file, and a
`BatchSummary` of what happened (judged, cached, abstained, usage).

Modules:

- :mod:`.options`: `JobOptions`, how a job runs (one frozen record for the local, Ray and Batch API back ends);
- :mod:`.stream`: `judge_stream` (concurrent, bounded memory, cache, retries) and `run_judge_file`;
- :mod:`.summary`: `BatchSummary`, what a run did (tokens per item and per stage), and `UsageTotals`;
- :mod:`.budget`: `TokenBudget`, a run's hard token cap (each call reserves its worst case first);
- :mod:`.pricing`: `Price`, a model's USD per million tokens (``--price`` or litellm's offline cost map), and
  `CostBudget`, a run's hard cap in US dollars (the token budget counted in picodollars);
- :mod:`.executors`: how the calls are made (one event loop for the fast path, or worker threads);
- :mod:`.writer`: the crash-safe verdict writer and the checking pass's spill;
- :mod:`.job`: the job a verdict file belongs to, and resuming it after any kill;
- :mod:`.cascade`: a certified cascade over a file, stage by stage (`run_cascade`; the labeling queue of
  what it escalated; each line written as it is settled, resumable, tokens per line), and
  :mod:`.cascade_job`, one run of it;
- :mod:`.openai_batch`: the same through the OpenAI Batch API (`BatchCalls`, the runner's back end; `run_batch_api`);
- :mod:`.ray`: the same on a Ray cluster (`RayCalls`, the runner's back end; `judge_dataset` for a Ray Dataset; the
  ``[ray]`` extra).

Names are imported lazily.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.apply.options": ["JobOptions"],
    "rubricforge_dspy.apply.stream": ["judge_stream", "run_judge_file", "DuplicateIdError"],
    "rubricforge_dspy.apply.summary": ["BatchSummary", "UsageTotals"],
    "rubricforge_dspy.apply.budget": ["TokenBudget"],
    "rubricforge_dspy.apply.pricing": ["Price", "CostBudget", "price_of"],
    "rubricforge_dspy.apply.job": ["read_done", "ResumeState", "BatchOutputError"],
    "rubricforge_dspy.apply.cascade": ["run_cascade", "CascadeRun"],
    "rubricforge_dspy.apply.openai_batch": ["run_batch_api", "BatchClient", "BatchApiSummary", "BatchJobFailed"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
