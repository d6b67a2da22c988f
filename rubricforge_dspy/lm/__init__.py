"""The LM layer: which LM answers, how it is called, and what its failures mean.

- `config`: `LMConfig` (flags > environment > defaults, the key never stored), the wire ``response_format``
  dialects, `lm_name`.
- `engine`: `ChatCompletionsEngine` (one HTTP POST per call to ``/chat/completions``) and `make_lm`.
- `copies`: which LM a judge calls (`resolve_lm`), one-attempt and job-sized copies of an LM.
- `circuit`: the one dead-server circuit breaker (`LMCircuit`, `JudgeUnavailableError`).
- `errors`: the one transient-error rule (`error_kind`, `is_transient`, `is_outage`), by exception type.
- `fingerprint`: sha256 over canonical JSON, and the fingerprint of an LM's answer-changing settings.
- `budget`: the one token-budget rule (`TokenBudget`: each call reserves its worst case first).
- `budgeted`: `BudgetedLM`, an LM under a token or cost budget (the induction's and the cascade fit's
  `--token-budget` / `--cost-budget`), and `BudgetStop`.
- `pricing`: `Price` (a model's USD per million tokens: ``--price`` or litellm's offline cost map) and `CostBudget`,
  a hard cap in US dollars (the token budget counted in picodollars; `apply.pricing` re-exports them).
- `truncation`: a completion cut at ``max_tokens``, seen from its finish reason (`TruncatedCompletionError`,
  `check_finish`, `watch_completions`).

Names are imported lazily: fingerprinting an LM's settings or reading its configuration does not
import DSPy or httpx.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    # the wiring of the LM flags and the engine (SETTABLE_FIELDS, REFLECTION_DEFAULTS, ENV_PREFIX, REFLECTION_INFIX,
    # SHARD_CONNECTIONS) stays in its modules: not part of the package's surface
    "rubricforge_dspy.lm.config": ["LMConfig", "StructuredOutput", "STRUCTURED_OUTPUTS", "DEFAULT_COMPLETION_TOKENS",
                                   "DEFAULT_API_KEY_ENV", "structured_response_format", "bound_strings", "lm_name"],
    "rubricforge_dspy.lm.engine": ["ChatCompletionsEngine", "make_lm", "http_error"],
    "rubricforge_dspy.lm.copies": ["resolve_lm", "one_attempt_lm", "sized_lm"],
    "rubricforge_dspy.lm.circuit": ["JudgeUnavailableError", "CircuitOpen", "LMCircuit"],
    "rubricforge_dspy.lm.errors": ["LM_ERROR_KINDS", "RETRYABLE_KINDS", "error_kind", "status_kind", "is_transient",
                                   "is_outage"],
    "rubricforge_dspy.lm.fingerprint": ["Fingerprint", "LM_SETTINGS", "digest", "package_version", "lm_settings",
                                        "lm_fingerprint"],
    "rubricforge_dspy.lm.budget": ["TokenBudget", "Reservation", "prompt_bound", "PROMPT_OVERHEAD"],
    "rubricforge_dspy.lm.budgeted": ["BudgetedLM", "BudgetStop"],
    "rubricforge_dspy.lm.pricing": ["Price", "CostBudget", "price_of", "map_price"],
    "rubricforge_dspy.lm.truncation": ["TruncatedCompletionError", "CUT_REASONS", "check_finish", "finish_reasons",
                                       "CompletionWatch", "watch_completions"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
