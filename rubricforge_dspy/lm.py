"""Which LM judges, and which LM reflects: one configuration for CLI, environment and Python.

Precedence: explicit arguments (CLI flags) > environment variables > the embedded default.
Environment: RUBRICFORGE_API_BASE, RUBRICFORGE_MODEL, RUBRICFORGE_API_KEY_ENV (the *name* of the variable
holding the key, default OPENAI_API_KEY), and the same with REFLECTION_ for the reflection LM.
Keys are read from the environment at call time and never stored in programs or logs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import dspy

DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class LMConfig:
    """An OpenAI-compatible endpoint, or `api_base=None` for the embedded default."""

    model: str | None = None
    api_base: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int = 0
    timeout: float = 120.0
    num_retries: int = 2
    cache: bool = True

    @property
    def is_embedded(self) -> bool:
        return self.api_base is None

    @classmethod
    def from_env(cls, prefix: str = "RUBRICFORGE_", **overrides) -> "LMConfig":
        values = {
            "model": os.environ.get(f"{prefix}MODEL"),
            "api_base": os.environ.get(f"{prefix}API_BASE"),
            "api_key_env": os.environ.get(f"{prefix}API_KEY_ENV", "OPENAI_API_KEY"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**{k: v for k, v in values.items() if v is not None})

    def describe(self) -> str:
        """A loggable name of this LM: never contains the key."""
        return f"{self.model or 'embedded'}@{self.api_base or 'embedded'}"


def register_openai_compatible(model_name: str) -> None:
    """Declare `openai/<model_name>` to litellm as supporting JSON-schema structured outputs,
    so DSPy's JSONAdapter sends the judge's schema as `response_format` (SGLang, llama.cpp)."""
    import litellm

    litellm.register_model({
        f"openai/{model_name}": {
            "litellm_provider": "openai",
            "mode": "chat",
            "supports_response_schema": True,
            "supports_function_calling": False,
            "max_tokens": 8192,
            "max_input_tokens": 8192,
            "max_output_tokens": 8192,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
        }
    })


def make_lm(config: LMConfig) -> dspy.LM:
    """A `dspy.LM` speaking the OpenAI protocol to `config.api_base` (an SGLang or llama.cpp server).

    The model name should carry its revision: DSPy's cache key ignores the endpoint.
    """
    if config.is_embedded:
        raise ValueError("the embedded default needs a running server; use rubricforge_dspy.serving")
    if not config.model:
        raise ValueError(f"no model name given for endpoint {config.api_base}")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    register_openai_compatible(config.model)
    return dspy.LM(
        f"openai/{config.model}",
        api_base=config.api_base,
        api_key=os.environ.get(config.api_key_env, "local"),
        engine="litellm",
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        seed=config.seed,
        timeout=config.timeout,
        num_retries=config.num_retries,
        cache=config.cache,
    )
