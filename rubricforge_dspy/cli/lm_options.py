"""The LM flags of every command that calls a model, and the LMs they configure.

``--api-base --model --api-key-env --structured-output --max-tokens --timeout --max-string-length``
(and the ``--reflection-*`` twins for induction). Unset flags stay None and fall through to the
environment (`rubricforge_dspy.lm.config.LMConfig.from_env`); the LMs themselves come from the typed
`rubricforge_dspy.serve.open_lm` / `open_lms` (the embedded server when no endpoint is set).
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Mapping

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.lm.config import (
    DEFAULT_API_KEY_ENV,
    ENV_PREFIX,
    REFLECTION_INFIX,
    SETTABLE_FIELDS,
    STRUCTURED_OUTPUTS,
    LMConfig,
)
from rubricforge_dspy.lm.secrets import check_api_key_env

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["add_lm_arguments", "api_bases", "lm_config", "lm_configs", "lm_from_args"]


def api_bases(args: argparse.Namespace, flag: str = "") -> list[str]:
    """Every ``--api-base`` given, in order (several are for `judge --ray`'s round-robin; `cli.ray_options`
    checks that); ``flag`` ``"reflection_"`` for ``--reflection-api-base``."""
    given = getattr(args, flag + "api_base", None)
    if given is None:
        return []
    return [given] if isinstance(given, str) else [str(base) for base in given]


def _flag(args: argparse.Namespace, flag: str, name: str) -> Any:
    """The value of one LM flag; for ``--api-base``, given once or more, the last one."""
    if name == "api_base":
        bases = api_bases(args, flag)
        return bases[-1] if bases else None
    return getattr(args, flag + name, None)


def add_lm_arguments(parser: argparse.ArgumentParser, reflection: bool = True) -> argparse.ArgumentParser:
    """Add ``--api-base --model --api-key-env --structured-output --max-tokens --timeout
    --max-string-length`` (and the ``--reflection-*`` twins). Unset flags stay None and fall through
    to the environment."""
    roles = [("", "judge")] + ([("reflection-", "reflection")] if reflection else [])
    for flag, role in roles:
        group = parser.add_argument_group(f"{role} LM (default: the embedded local model)")
        group.add_argument(f"--{flag}api-base", default=None, action="append", metavar="URL",
                           help="OpenAI-compatible root URL, e.g. http://host:30000/v1"
                                + ("" if flag else " (judge --ray: repeat it for round-robin)"))
        group.add_argument(f"--{flag}model", default=None, help="served model name, carrying its revision")
        group.add_argument(f"--{flag}api-key-env", default=None,
                           help=f"NAME of the env var holding the key (default {DEFAULT_API_KEY_ENV})")
        group.add_argument(f"--{flag}structured-output", default=None, choices=STRUCTURED_OUTPUTS,
                           help="json_schema (SGLang/vLLM/llama-server) or json_object_schema (llama_cpp.server)")
        group.add_argument(f"--{flag}max-tokens", default=None, type=int,
                           help="cap on the tokens of each answer (an answer cut there is an abstention)")
        group.add_argument(f"--{flag}timeout", default=None, type=float,
                           help="seconds each request may take before it counts as failed")
        group.add_argument(f"--{flag}max-string-length", default=None, type=int,
                           help="maxLength added to response-schema strings (0: none; embedded default 300)")
    return parser


def lm_config(args: argparse.Namespace, role: str = "judge", environ: Mapping[str, str] | None = None,
              **defaults: Any) -> LMConfig:
    """The configuration of ``role`` ("judge" or "reflection") from the flags of `add_lm_arguments`, then
    the environment. `defaults` stand in for flags left unset (they still win over the environment,
    as a flag would)."""
    flag = "" if role == "judge" else "reflection_"
    _check_key_env_names(args, environ)
    overrides: dict[str, Any] = {name: _flag(args, flag, name) for name in SETTABLE_FIELDS}
    overrides = {**overrides, **{k: v for k, v in defaults.items() if overrides.get(k) is None}}
    if role == "judge":
        config = LMConfig.from_env(role, environ, **overrides)
    else:
        # Without --reflection-api-base the reflection LM is the judge's endpoint, CLI flags included.
        judge = {name: _flag(args, "", name) for name in SETTABLE_FIELDS}
        config = LMConfig.from_env(role, environ, judge_overrides=judge, **overrides)
    _check_key_is_set(args, config, environ)
    return config


def _check_key_is_set(args: argparse.Namespace, config: LMConfig, environ: Mapping[str, str] | None) -> None:
    """Refuse (exit 2) a key variable named on purpose (``--api-key-env NAME``, ``--reflection-api-key-env``
    or ``RUBRICFORGE_[REFLECTION_]API_KEY_ENV``) that is unset or empty when an endpoint will be called:
    the run would go out with no key and no word of it, and fail (or bill) as somebody else. The default
    name (`DEFAULT_API_KEY_ENV`) may stay unset: most local servers take no key."""
    if config.is_embedded:
        return
    environ = os.environ if environ is None else environ
    named = {getattr(args, flag, None) for flag in ("api_key_env", "reflection_api_key_env")}
    named |= {environ.get(f"{ENV_PREFIX}{infix}API_KEY_ENV") for infix in ("", REFLECTION_INFIX)}
    if config.api_key_env in named - {None, ""} and not environ.get(config.api_key_env):
        raise InputError(f"--api-key-env {config.api_key_env}: the environment variable {config.api_key_env} is "
                         f"not set (or empty), so {config.api_base} would be called with no key. Export it "
                         f"(export {config.api_key_env}=...), or drop --api-key-env for a server that takes no key")


def _check_key_env_names(args: argparse.Namespace, environ: Mapping[str, str] | None) -> None:
    """Refuse (exit 2) an ``--api-key-env`` value, or ``RUBRICFORGE_API_KEY_ENV``, that looks like a key,
    naming the flag or variable it came from (`lm.secrets.check_api_key_env`; the value is never echoed)."""
    environ = os.environ if environ is None else environ
    for infix, flag in (("", "api_key_env"), (REFLECTION_INFIX, "reflection_api_key_env")):
        check_api_key_env(getattr(args, flag, None), "--" + flag.replace("_", "-"))
        variable = f"{ENV_PREFIX}{infix}API_KEY_ENV"
        check_api_key_env(environ.get(variable) or None, variable)


def lm_configs(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
               reflection_max_tokens: int | None = None) -> tuple[LMConfig, LMConfig]:
    """(judge, reflection) configurations; `reflection_max_tokens` replaces an unset ``--reflection-max-tokens``."""
    return (lm_config(args, "judge", environ),
            lm_config(args, "reflection", environ, max_tokens=reflection_max_tokens))


@contextmanager
def lm_from_args(args: argparse.Namespace, reflection: bool = False,
                 reflection_max_tokens: int | None = None) -> Iterator[Any]:
    """Yield the judge `dspy.LM` (and the reflection LM when `reflection`) configured by the flags of
    `add_lm_arguments` and the environment, starting the embedded llama.cpp server when no endpoint is
    configured; judge and reflection share one embedded server."""
    from rubricforge_dspy.serve import open_lm, open_lms  # DSPy: imported only by commands that call an LM

    if not reflection:
        with open_lm(lm_config(args, "judge")) as lm:
            yield lm
        return
    with open_lms(*lm_configs(args, reflection_max_tokens=reflection_max_tokens)) as lms:
        yield lms


def add_token_budget_argument(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """Add ``--token-budget N``: the most tokens a run's LM calls may spend (`apply.budget.TokenBudget`); `help_text`
    replaces the judging run's help text."""
    parser.add_argument("--token-budget", type=_positive_tokens, default=None, metavar="N",
                        help=help_text or "the most tokens (prompt + completion, as the LM reports them) this run's LM "
                             "calls may spend: each call reserves its worst case (its prompt's bound + --max-tokens) "
                             "first, and the run stops before the cap would be crossed (exit 5), keeping what it "
                             "judged; re-run with a larger budget to judge the rest. Local runs only (not "
                             "--ray/--batch-api)")


def _positive_tokens(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of tokens, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1 token, got {value}")
    return value
