"""Fingerprints: a sha256 over canonical JSON, and the fingerprint of an LM's answer-changing settings.

`judge.fingerprint` builds the judge's fingerprint (the cache and job key) on these; the drift check of a
frozen program (`program.drift`) compares LM fingerprints.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.lm.secrets import redact_url

if TYPE_CHECKING:
    import dspy

__all__ = ["Fingerprint", "LM_SETTINGS", "LOCAL_SERVER", "digest", "package_version", "lm_settings",
           "lm_fingerprint"]

# The endpoint recorded for a server this process started itself (its port changes on every start).
LOCAL_SERVER = "(started by this process: see served_model)"
LM_SETTINGS = ("model", "api_base", "temperature", "max_tokens", "seed", "structured_output", "max_string_length")


@dataclass(frozen=True)
class Fingerprint:
    """What identifies an LM configuration (model, endpoint identity, sampling settings): ``sha256`` of the
    ``parts``; certificates and verdict caches are bound to it."""

    sha256: str
    parts: dict[str, Any]

    def diff(self, other: "Fingerprint") -> list[str]:
        """Dotted names of the parts that differ (empty when equal)."""
        return _diff(self.parts, other.parts, "")


def digest(value: Any) -> str:
    """sha256 of the canonical JSON of `value` (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def package_version(package: str) -> str | None:
    """The installed version of `package`, or None."""
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return None


def lm_settings(lm: dspy.BaseLM | None) -> dict[str, Any]:
    """The answer-changing settings of a `dspy.LM` (or None for no LM), read from the LM and its engine.

    The endpoint (``api_base``) is written with any secret in it redacted (`lm.secrets.redact_url`). For a
    server this process started (the embedded one, whose config carries a ``server_identity``), the
    endpoint is `LOCAL_SERVER` and ``served_model`` holds what it serves (weights, engine version,
    settings): its ephemeral port is not part of the identity."""
    if lm is None:
        return {name: None for name in LM_SETTINGS}
    kwargs = dict(getattr(lm, "kwargs", {}) or {})
    config = getattr(getattr(lm, "engine", None), "config", None)
    identity = getattr(config, "server_identity", None)
    api_base = getattr(config, "api_base", None) or kwargs.get("api_base")
    values = {
        "model": getattr(lm, "model", None),
        "api_base": LOCAL_SERVER if identity else redact_url(api_base),
        "temperature": kwargs.get("temperature"),
        "max_tokens": kwargs.get("max_tokens", kwargs.get("max_completion_tokens")),
        "seed": kwargs.get("seed"),
        "structured_output": getattr(config, "structured_output", None),
        "max_string_length": getattr(config, "max_string_length", None),
    }
    if identity:
        values["served_model"] = json.loads(identity) if isinstance(identity, str) else dict(identity)
    return values


def lm_fingerprint(lm: dspy.BaseLM | None) -> Fingerprint:
    """The `Fingerprint` of `lm` (a ``dspy.LM``): its model, endpoint identity and sampling settings, never
    its API key."""
    parts = lm_settings(lm)
    return Fingerprint(digest(parts), parts)


def _diff(a: Any, b: Any, prefix: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        names = []
        for key in sorted(set(a) | set(b)):
            names += _diff(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key))
        return names
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [name for i, (x, y) in enumerate(zip(a, b, strict=True)) for name in _diff(x, y, f"{prefix}.{i}")]
    if a != b:
        return [prefix or "(all)"]
    return []
