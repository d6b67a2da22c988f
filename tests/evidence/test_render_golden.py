"""Golden-output regression test for the renderer: its text IS the contract (a judge fingerprint names
`RENDER_VERSION`, so a faster renderer must write byte-identical text).

EXPECTED_* were computed by running this module's `_digest` on the code as it was at commit 86a59ce
(before the render speed-ups of issue 20 part I), i.e. `python3 -c "from tests.evidence.test_render_golden import
_digest; from tests.support.render_corpus import SHIPPED; print(_digest(SHIPPED))"` (and the same for
`synthetic_trajectories()`; the corpus lives in tests/support/render_corpus.py). A deliberate
change of the render's text must bump `RENDER_VERSION` and recompute them.

EXPECTED_SHIPPED was recomputed once, deliberately, for issue #26 item 5 (look-alike closing tags): the
adversarial corpus gained three records, and its `look-alike-fences` record now renders its full-width
``＜`` as ``<``. Every other shipped trajectory (856 of them) renders byte-identically to commit 939d3d5,
as does the synthetic set, so `RENDER_VERSION` stays 3: only text holding look-alikes of ``<`` or of the
chosen quote tag renders differently.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rubricforge_dspy.core.presets import EMBEDDED, SERVER
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.clip import fit, sanitize
from rubricforge_dspy.evidence.render import RenderConfig, render_step, render_trajectory
from rubricforge_dspy.evidence.tokens import estimate_tokens
from tests.support.render_corpus import SHIPPED, synthetic_trajectories

EXPECTED_SHIPPED = "746534d352756a9b651e8abb5827be5888466d0b36ed0bcb51c6705bc157217d"
EXPECTED_SYNTHETIC = "6edf58ae3c7890ccae2bfd9a1894dcd289d845cb255358e2a25bd2a42b5381bb"

def _digest(trajectories_or_files) -> str:
    h = hashlib.sha256()
    items = trajectories_or_files
    if items and isinstance(items[0], Path):
        items = [t for f in items for t in load_trajectories(f)]
    for trajectory in items:
        for preset in (EMBEDDED, SERVER):
            h.update(render_trajectory(trajectory, RenderConfig.of(preset)).encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        for number, step in enumerate(trajectory.steps[:3], 1):
            h.update(render_step(number, step, 200).encode("utf-8", "surrogatepass"))
            text = step.content or ""
            clean, removed = sanitize(text)
            h.update(f"\x00{estimate_tokens(text)}\x00{removed}\x00".encode())
            h.update(fit(clean, 50).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@pytest.mark.slow
def test_shipped_renders_are_byte_identical_to_the_golden_digest():
    for path in SHIPPED:
        if not path.exists():
            pytest.fail(f"shipped data file missing: {path}")
    assert _digest(SHIPPED) == EXPECTED_SHIPPED


def test_adversarial_synthetic_renders_are_byte_identical_to_the_golden_digest():
    assert _digest(synthetic_trajectories()) == EXPECTED_SYNTHETIC


def test_the_render_adds_up_its_token_estimate_exactly(monkeypatch):
    """The renderer no longer estimates its whole text to check it fits: it adds up its lines' estimates
    (`RenderPart.tokens`) and one per line break. That sum must be `estimate_tokens` of the text it returns,
    for every render (both presets, tight budgets, adversarial text), or a render could overflow."""
    from rubricforge_dspy.evidence import render

    sums = []
    fit_lines = render._fit_lines

    def counted(*args):
        lines, tokens, evidence = fit_lines(*args)
        sums.append((lines, tokens))
        return lines, tokens, evidence

    monkeypatch.setattr(render, "_fit_lines", counted)
    trajectories = synthetic_trajectories() + list(load_trajectories(SHIPPED[5]))
    for config in (RenderConfig.of(SERVER), RenderConfig.of(EMBEDDED), RenderConfig(max_tokens=300, max_step_chars=40)):
        for trajectory in trajectories:
            sums.clear()
            text = render_trajectory(trajectory, config)
            lines, tokens = sums[-1]
            header = text[:len(text) - len("\n".join(lines)) - 1]
            assert "\n".join([header, *lines]) == text
            assert estimate_tokens(header) + len(lines) + tokens == estimate_tokens(text)
    assert len(trajectories) > 60
