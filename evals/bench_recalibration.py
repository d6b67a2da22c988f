"""Which labels may recalibrate a cascade (issue 39, item 6): a simulated population where the true risks are known.

    PYTHONPATH=. python -m evals.bench_recalibration      # writes evals/results/recalibration.json (~1 min, 2 cores)

Simulated, no LM: each item's chance of passing is ``z ~ U(0, 1)``, its label ``y ~ Bernoulli(z)``; the stage to
refit has confidence ``z`` (calibrated); the cascade already deployed decided where its own noisy confidence
(``z + N(0, 0.1)``, clipped) was >= 0.9 or <= 0.1 and escalated the rest. A person's labels for the refit come
from one of three samples of the same size:

- ``audit over everything judged``: a uniform draw over the population (what `trust.label_next.draw_audit` does);
- ``audit over decided items only``: a uniform draw over what the deployed cascade decided;
- ``escalated items``: what the deployed cascade sent to a person.

Each is fit by Learn-then-Test (`metrics.risk_control.learn_then_test`, the default method, alpha 0.1, delta
0.1, one stage), and the chosen thresholds' disagreement is computed on the whole population (200,000 items): the
fit is valid when the share of draws that certify thresholds whose population disagreement is above alpha is at
most delta (``violation_share_of_draws``).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np

from rubricforge_dspy.metrics.risk_control import learn_then_test

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "evals" / "results" / "recalibration.json"
POPULATION, LABELS, DRAWS, ALPHA, DELTA = 200_000, 400, 200, 0.1, 0.1


def population_disagreement(z: np.ndarray, y: np.ndarray, t_pass: float, t_fail: float) -> tuple[float, float]:
    """(D among decided, decided share) of thresholds on the whole population."""
    passes, fails = z >= t_pass, z <= t_fail
    decided = passes | fails
    if not decided.any():
        return 0.0, 0.0
    wrong = (passes & (y == 0)) | (fails & (y == 1))
    return float(wrong.sum() / decided.sum()), float(decided.mean())


def main() -> dict:
    rng = np.random.default_rng(0)
    z = rng.uniform(size=POPULATION)
    y = (rng.uniform(size=POPULATION) < z).astype(int)
    old = np.clip(z + rng.normal(0, 0.1, size=POPULATION), 0, 1)
    old_decided = (old >= 0.9) | (old <= 0.1)
    pools = {"audit over everything judged": np.arange(POPULATION),
             "audit over decided items only": np.flatnonzero(old_decided),
             "escalated items": np.flatnonzero(~old_decided)}
    rows = {}
    for name, pool in pools.items():
        certified, violations, coverage, risks = 0, 0, [], []
        for draw in range(DRAWS):
            pick = np.random.default_rng(1000 + draw).choice(pool, size=LABELS, replace=False)
            result = learn_then_test(z[None, pick], y[pick], ALPHA, DELTA, seed=draw)
            if not result.certified:
                continue
            certified += 1
            (t_pass, t_fail), = result.thresholds
            risk, share = population_disagreement(z, y, t_pass, t_fail)
            violations += risk > ALPHA
            risks.append(risk)
            coverage.append(share)
        rows[name] = {"pool": int(len(pool)), "certified_draws": certified, "draws": DRAWS,
                      "population_D_above_alpha": violations,
                      "violation_share_of_draws": violations / DRAWS,  # the guarantee: at most delta
                      "violation_share_of_certified": violations / certified if certified else None,
                      "mean_population_D": float(np.mean(risks)) if risks else None,
                      "mean_population_coverage": float(np.mean(coverage)) if coverage else None}
    out = {"benchmark": "recalibration", "simulated": True, "lm": "none (simulated labels and confidences)",
           "alpha": ALPHA, "delta": DELTA, "labels_per_fit": LABELS, "population": POPULATION,
           "deployed_cascade_decided_share": float(old_decided.mean()), "rows": rows,
           "machine": {"cpus": os.cpu_count(), "system": platform.system(), "python": platform.python_version(),
                       "note": "a shared 2-core VM (other jobs may run)"}}
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main()["rows"], indent=2))
