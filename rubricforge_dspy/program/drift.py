"""Does a frozen program's certificate cover the judge about to run? The drift check of a loaded judge.

A certificate (`trust.certificate`) is bound to the LM fingerprint and render version it was measured
with. `check_drift` compares them with the LM in use and warns `UncertifiedJudgeWarning` when they
differ, or when there is no certificate at all. A judge from `judge.loading.load_judge` runs it once per
LM, when it first runs with that LM (`judge.contract.BaseJudge`), not when it is loaded: the DSPy idiom
``load_judge(path)`` then ``judge.set_lm(lm)`` warns only if `lm` is not the certified LM.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping
from urllib.parse import urlsplit

import dspy

from rubricforge_dspy.core.errors import RubricForgeWarning
from rubricforge_dspy.evidence.render import RENDER_VERSION
from rubricforge_dspy.lm.fingerprint import Fingerprint, lm_fingerprint
from rubricforge_dspy.program.store import CERTIFICATE_KEY

__all__ = ["UncertifiedJudgeWarning", "check_drift", "check_render_version", "LOOPBACK_HOSTS"]


class UncertifiedJudgeWarning(RubricForgeWarning):
    """The judge in use has no certificate, or runs on an LM other than the one it was certified with."""


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _comparable(parts: Mapping[str, Any]) -> dict[str, Any]:
    """LM fingerprint parts with the port of a loopback ``api_base`` blanked: a server this machine
    starts (the embedded one) gets a fresh port each time; its model name carries the weights' revision."""
    parts = dict(parts)
    base = parts.get("api_base")
    if isinstance(base, str):
        split = urlsplit(base)
        if split.hostname in LOOPBACK_HOSTS:
            parts["api_base"] = split._replace(netloc=f"{split.hostname}:*").geturl()
    return parts


def check_drift(manifest: Mapping[str, Any] | None, lm: dspy.BaseLM | None, where: str = "program") -> list[str]:
    """Warn `UncertifiedJudgeWarning` when there is no certificate, or when `lm` (else the configured
    `dspy.settings.lm`) differs from the certified LM; returns the differing fingerprint parts.

    A change of port alone on a loopback ``api_base`` (127.0.0.1, localhost) is not a difference:
    locally started servers get a new port each time. A drift of the weights behind one name is what
    `rubricforge certify --recheck` on a canary set is for."""
    certificate = (manifest or {}).get(CERTIFICATE_KEY)
    if not certificate:
        warnings.warn(f"{where}: this judge has no certificate: how often it passes failed trajectories was "
                      "never measured on held-out data; run `rubricforge certify`", UncertifiedJudgeWarning,
                      stacklevel=3)
        return []
    render_changed = check_render_version(manifest, where)
    if lm is None:
        lm = dspy.settings.lm
    if lm is None:
        return render_changed
    certified = certificate.get("lm_fingerprint") or {}
    current = lm_fingerprint(lm)
    if current.sha256 == certified.get("sha256"):
        return render_changed
    parts = certified.get("parts") or {}
    differ = Fingerprint("", _comparable(current.parts)).diff(Fingerprint("", _comparable(parts)))
    if not differ:
        return render_changed
    detail = ", ".join(f"{name}: certified {parts.get(name)!r}, now {current.parts.get(name)!r}" for name in differ)
    warnings.warn(f"{where}: certified with another LM ({detail}); its certificate does not cover this LM. "
                  "Run `rubricforge certify` with this LM, or use the certified one", UncertifiedJudgeWarning,
                  stacklevel=3)
    return render_changed + differ


def check_render_version(manifest: Mapping[str, Any] | None, where: str = "program") -> list[str]:
    """Warn `UncertifiedJudgeWarning` when a program's certificate was measured on text of another
    render version than this install's (`render_version` in the certificate; a certificate without one
    predates render versions: version 1). Returns ``["render.version"]`` then, else []."""
    certificate = (manifest or {}).get(CERTIFICATE_KEY)
    if not certificate:
        return []
    recorded = certificate.get("render_version", 1)
    if recorded == RENDER_VERSION:
        return []
    warnings.warn(f"{where}: certified on text rendered by render version {recorded}; this install renders "
                  f"version {RENDER_VERSION} (see rubricforge_dspy/render.py), so the certificate does not "
                  "cover what the judge now reads. Run `rubricforge certify` again", UncertifiedJudgeWarning,
                  stacklevel=4)
    return ["render.version"]
