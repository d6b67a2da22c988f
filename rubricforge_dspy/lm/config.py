"""Which LM judges, and which LM reflects: one configuration for CLI flags, environment and Python.

Precedence, for each field: explicit value (Python argument or CLI flag) > environment > default.
With no api_base anywhere, the configuration is the *embedded default* (a local llama.cpp server
started by `rubricforge_dspy.serve`).

Environment variables (the judge LM; the reflection LM reads the same names with ``REFLECTION_``
after the prefix, e.g. ``RUBRICFORGE_REFLECTION_API_BASE``, and falls back to the judge LM entirely
when none of its own settings is given):

    RUBRICFORGE_API_BASE           OpenAI-compatible root, e.g. http://127.0.0.1:30000/v1
    RUBRICFORGE_MODEL              served model name; must carry the revision (DSPy's cache ignores the URL)
    RUBRICFORGE_API_KEY_ENV        the *name* of the variable holding the key (default RUBRICFORGE_API_KEY)
    RUBRICFORGE_STRUCTURED_OUTPUT  json_schema (SGLang, vLLM, llama-server, OpenAI) | json_object_schema
                                   (python -m llama_cpp.server)
    RUBRICFORGE_MAX_TOKENS, RUBRICFORGE_TIMEOUT

The key itself is read from the environment at request time; it is never a field of `LMConfig`,
so it cannot reach `describe()`, `to_dict()`, saved programs, manifests or logs. A value of
``api_key_env`` that looks like a key is refused (`lm.secrets.check_api_key_env`); a secret inside
``api_base`` (``user:pass@``, ``?key=``) is redacted wherever the endpoint is written (`describe`,
`lm_name`, fingerprints, error messages: `lm.secrets.redact_url`), never in the requests.

The request side of the configuration lives here too: `structured_response_format` (the wire
``response_format`` in the configured dialect, strings bounded by ``max_string_length``) and `lm_name`
(a loggable name of any LM).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping

from rubricforge_dspy._lazy import renamed_constants
from rubricforge_dspy.core.errors import InputError, RubricForgeDeprecationWarning
from rubricforge_dspy.lm.secrets import check_api_key_env, redact_url

if TYPE_CHECKING:
    import dspy

__all__ = [
    "LMConfig", "StructuredOutput", "STRUCTURED_OUTPUTS", "SETTABLE_FIELDS", "DEFAULT_COMPLETION_TOKENS",
    "DEFAULT_API_KEY_ENV", "REFLECTION_DEFAULTS", "ENV_PREFIX", "REFLECTION_INFIX",
    "structured_response_format", "bound_strings", "lm_name",
]

DEFAULT_COMPLETION_TOKENS = 256  # a judge's answer: the completion tokens the LM may generate (`max_tokens`)
DEFAULT_API_KEY_ENV = "RUBRICFORGE_API_KEY"
REFLECTION_DEFAULTS = {"max_tokens": 4096}
ENV_PREFIX = "RUBRICFORGE_"
REFLECTION_INFIX = "REFLECTION_"
StructuredOutput = Literal["json_schema", "json_object_schema"]
STRUCTURED_OUTPUTS: tuple[str, ...] = ("json_schema", "json_object_schema")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Fields settable from the environment / CLI, with their parsers.
SETTABLE_FIELDS = {"api_base": str, "model": str, "api_key_env": str, "structured_output": str,
             "max_tokens": int, "timeout": float, "max_string_length": int}


@dataclass(frozen=True)
class LMConfig:
    """An OpenAI-compatible endpoint, or ``api_base=None`` for the embedded default.

    max_string_length: when set (and not 0), every string property of the response schema that has
    no ``maxLength`` gets this one, so a grammar-constrained server cannot ramble a free-text field
    until ``max_tokens`` cuts the JSON short (DSPy drops a field's ``max_length`` from the schema).
    max_connections: the HTTP connections of the engine (split into pools of at most 16, threads dealt
        to them in turn); batch judging and induction raise it to their concurrency, so no request waits
        for a connection.
    cache: DSPy's own response cache, off by default: its key ignores the endpoint, so it could answer
    for another server. The one cache that answers judge calls is the verdict cache
    (`rubricforge_dspy.judge.cache`), keyed by the judge's fingerprint.
    server_identity: for a server this process started itself (the embedded one), the canonical JSON of
        what it serves (weights file and sha256, engine version, context size, seed: see
        `rubricforge_dspy.serve.embedded.served_identity`). It stands for the endpoint in the LM's
        fingerprint (`lm.fingerprint.lm_settings`): the ephemeral port changes on every start, the
        served model does not, so a killed run resumes and the verdict cache hits. None (the default) for
        any other endpoint, whose ``api_base`` stays part of the identity.
    """

    model: str | None = None
    api_base: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    structured_output: StructuredOutput = "json_schema"
    temperature: float = 0.0
    max_tokens: int = DEFAULT_COMPLETION_TOKENS
    seed: int = 0
    timeout: float = 120.0
    num_retries: int = 2
    cache: bool = False
    max_string_length: int | None = None
    max_connections: int = 64
    server_identity: str | None = None

    def __post_init__(self) -> None:
        # Refuse anything that is not a variable name: a key pasted here would be sent nowhere and logged.
        check_api_key_env(self.api_key_env or "-", "api_key_env")
        if not _ENV_NAME.match(self.api_key_env or ""):
            raise InputError("api_key_env must be the NAME of an environment variable (letters, digits, _)")
        if self.structured_output not in STRUCTURED_OUTPUTS:
            raise InputError(f"structured_output must be one of {STRUCTURED_OUTPUTS}, "
                             f"got {self.structured_output!r}")
        if self.max_tokens < 1:
            raise InputError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.api_base is not None:
            object.__setattr__(self, "api_base", self.api_base.rstrip("/"))

    @property
    def is_embedded(self) -> bool:
        return self.api_base is None

    @property
    def api_key(self) -> str | None:
        """The key, read from the environment now (never stored)."""
        return os.environ.get(self.api_key_env) or None

    @classmethod
    def from_env(cls, role: str = "judge", environ: Mapping[str, str] | None = None,
                 prefix: str = ENV_PREFIX, judge_overrides: Mapping[str, Any] | None = None,
                 **overrides: Any) -> "LMConfig":
        """The configuration of ``role`` ("judge" or "reflection"): overrides > environment > defaults.

        Overrides that are None are ignored, so CLI flags left unset fall through to the environment.
        A reflection LM without its own api_base uses the judge's endpoint (embedded included), with
        the reflection defaults (a longer ``max_tokens``: it writes whole rubrics). `judge_overrides` are
        the judge's own explicit values (its CLI flags), which that fallback honours too.
        """
        environ = os.environ if environ is None else environ
        explicit = {k: v for k, v in overrides.items() if v is not None}
        own = {**_from_environ(environ, _role_prefix(role, prefix)), **explicit}
        if role == "judge":
            return cls(**own)
        base = {}
        if "api_base" not in own:
            judge = cls.from_env("judge", environ, prefix, **(judge_overrides or {})).to_dict()
            base = {k: v for k, v in judge.items() if k in SETTABLE_FIELDS}
        return cls(**{**base, **REFLECTION_DEFAULTS, **own})

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to reproduce the LM, minus the key (only its variable's name)."""
        return asdict(self)

    def describe(self) -> str:
        """A loggable name of this LM: never contains the key."""
        if self.is_embedded:
            return f"{self.model or 'embedded'} (embedded llama.cpp server)"
        return f"{self.model}@{redact_url(self.api_base)} ({self.structured_output}, key from ${self.api_key_env})"


def _role_prefix(role: str, prefix: str) -> str:
    if role not in ("judge", "reflection"):
        raise ValueError(f"role must be 'judge' or 'reflection', got {role!r}")
    return prefix + (REFLECTION_INFIX if role == "reflection" else "")


def _from_environ(environ: Mapping[str, str], prefix: str) -> dict[str, Any]:
    values = {}
    for name, parse in SETTABLE_FIELDS.items():
        raw = environ.get(prefix + name.upper())
        if raw not in (None, ""):
            values[name] = parse(raw)
    return values


# --------------------------------------------------------------------------------------------
# The request side: the wire response_format, and a loggable name.


def structured_response_format(canonical: Mapping[str, Any] | None, dialect: str,
                               max_string_length: int | None = None) -> dict[str, Any] | None:
    """The wire ``response_format`` for DSPy's canonical one (``{"type", "schema", "name", "strict"}``).

    json_schema:        ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``
    json_object_schema: ``{"type": "json_object", "schema": ...}`` (llama_cpp.server answers HTTP 500
                        to json_schema but builds a grammar from this form)
    """
    if not canonical:
        return None
    if canonical.get("type") != "json_schema":
        return {"type": canonical.get("type", "json_object")}
    schema = canonical.get("schema") or {}
    if max_string_length:
        schema = bound_strings(schema, max_string_length)
    if dialect == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    inner = {"name": canonical.get("name") or "response", "schema": schema}
    if canonical.get("strict") is not None:
        inner["strict"] = canonical["strict"]
    return {"type": "json_schema", "json_schema": inner}


def bound_strings(schema: Any, limit: int) -> Any:
    """A copy of `schema` where every string without ``maxLength`` has ``maxLength: limit``."""
    if isinstance(schema, list):
        return [bound_strings(item, limit) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bound_strings(value, limit) for key, value in schema.items()}
    if out.get("type") == "string" and "maxLength" not in out and "enum" not in out:
        out["maxLength"] = limit
    return out


def lm_name(lm: dspy.BaseLM | None) -> str:
    """A loggable name of `lm`: its model string (which carries the revision) and, when it has one,
    its endpoint (any secret in the URL redacted); never its key."""
    if lm is None:
        return "(no LM)"
    config = getattr(getattr(lm, "engine", None), "config", None)
    base = getattr(config, "api_base", None)
    name = str(getattr(lm, "model", None) or type(lm).__name__)
    return f"{name} @ {redact_url(base)}" if base else name


__getattr__ = renamed_constants(__name__, {  # the old name, with a DeprecationWarning
    "DEFAULT_MAX_TOKENS": ("DEFAULT_COMPLETION_TOKENS", "the completion tokens of a judge's answer")},
    RubricForgeDeprecationWarning)
