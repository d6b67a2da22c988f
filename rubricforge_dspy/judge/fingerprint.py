"""Fingerprints: sha256 digests of everything that changes a judge's answer.

`judge_fingerprint(judge, lm)` is the verdict cache's key (with the rendered text's hash), the identity
recorded in every verdict line and output file, and what a certificate is bound to. It covers:

- the program: the Signature's instructions (the rubric) and, for every field, its name, type,
  description and prefix; the demonstrations;
- the adapter: its class and settings;
- the LM settings that change an answer (`lm_fingerprint`): model name, endpoint (``api_base``:
  two servers may serve different weights under one name), temperature, max_tokens, seed,
  structured-output dialect, max string length;
- the render configuration and the render algorithm's version (what text the judge is shown);
- the operating point: the calibration map and the pass threshold, when the program has them;
- the versions of rubricforge-dspy and DSPy (prompt formatting and parsing live there).

Anything else (timeouts, retries, connection pool sizes, the API key) does not change an answer and
is left out. The parts are kept (`Fingerprint.parts`) so a mismatch can say *what* changed.
"""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from rubricforge_dspy.evidence.render import RENDER_VERSION
from rubricforge_dspy.lm.fingerprint import (
    LM_SETTINGS,
    Fingerprint,
    digest,
    lm_fingerprint,
    lm_settings,
    package_version,
)

if TYPE_CHECKING:
    import dspy
    from pydantic.fields import FieldInfo

__all__ = ["Fingerprint", "digest", "lm_fingerprint", "lm_settings", "LM_SETTINGS", "judge_parts", "judge_fingerprint",
           "signature_parts", "adapter_parts"]


def signature_parts(signature: type[dspy.Signature]) -> dict[str, Any]:
    """Instructions and every field's name, type, description and prefix, in order."""
    def field(name: str, info: FieldInfo) -> dict[str, Any]:
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}  # dspy's are dicts
        return {"name": name, "type": str(info.annotation), "desc": extra.get("desc"),
                "prefix": extra.get("prefix"), "io": extra.get("__dspy_field_type")}

    return {"instructions": signature.instructions,
            "fields": [field(name, info) for name, info in signature.fields.items()]}


def adapter_parts(adapter: dspy.Adapter | None) -> dict[str, Any]:
    if adapter is None:
        return {"class": None}
    settings = {k: v for k, v in sorted(vars(adapter).items())
                if not k.startswith("_") and isinstance(v, (str, int, float, bool, type(None)))}
    return {"class": f"{type(adapter).__module__}.{type(adapter).__qualname__}", "settings": settings}


def judge_parts(judge: dspy.Module, lm: dspy.BaseLM | None) -> dict[str, Any]:
    """The fingerprint parts of a `TrajectoryJudge` (or any module with one predictor) and its LM."""
    predictors = judge.predictors() if hasattr(judge, "predictors") else []
    programs = [{"signature": signature_parts(p.signature),
                 "demos": [dict(d) for d in p.demos]} for p in predictors]
    render = getattr(judge, "render_config", None)
    return {
        "programs": programs,
        "adapter": adapter_parts(getattr(judge, "adapter", None)),
        "lm": lm_settings(lm),
        "render": _render_parts(render),
        "operating_point": judge.operating_point() if hasattr(judge, "operating_point") else None,
        # how a long-episode judge reads (windows, overlap, caps): a verdict read otherwise is not reused
        "reading": judge.reading_settings() if hasattr(judge, "reading_settings") else None,
        "versions": {"rubricforge_dspy": package_version("rubricforge-dspy"), "dspy": package_version("dspy")},
    }


def _render_parts(render: object) -> dict[str, Any] | None:
    """The render configuration and the render algorithm's version (`render.RENDER_VERSION`)."""
    if not is_dataclass(render) or isinstance(render, type):
        return None
    return {**asdict(render), "version": RENDER_VERSION}


def judge_fingerprint(judge: dspy.Module, lm: dspy.BaseLM | None) -> Fingerprint:
    """The fingerprint of `judge` answering with `lm` (see the module docstring for what it covers)."""
    parts = judge_parts(judge, lm)
    return Fingerprint(digest(parts), parts)
