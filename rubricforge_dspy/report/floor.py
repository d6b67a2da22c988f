"""The floor in the report: does the induced judge beat the symptom floor, does episode length alone
give the outcome away, and does the floor itself (`rubricforge_dspy.core.judge_names`)? Computed from the main
table's rows of the ``floor`` and ``length_only`` judges (their verdicts are persisted like every judge's)."""

from __future__ import annotations

from typing import Any

from rubricforge_dspy.core.judge_names import (
    FLOOR,
    FLOOR_GIVEAWAY_RULE,
    GIVEAWAY_RULE,
    HYBRID,
    LENGTH_ONLY,
    floor_giveaway_sentence,
    floor_gives_away,
    giveaway_sentence,
    gives_away,
)

__all__ = ["floor_table", "NO_FLOOR_NOTE"]

NO_FLOOR_NOTE = ("no floor rows: the run has no floor.jsonl and length_only.jsonl verdicts. Add them with "
                 "`rubricforge report --predictions ... --floor-data LABELED` (the labeled trajectories judged: "
                 "task-grouped cross-validation on those items)")


def floor_table(main: list[dict[str, Any]], induced: str, notes: list[str]) -> dict[str, Any]:
    """What the report says above its tables about the floor (see the module docstring)."""
    rows = {row["judge"]: row for row in main}
    out = {"floor": FLOOR in rows, "length_only": LENGTH_ONLY in rows, "hybrid": HYBRID in rows,
           "giveaway_rule": GIVEAWAY_RULE, "gives_away": None, "giveaway_sentence": None, "vs_floor": None,
           "hybrid_row": None,
           "floor_giveaway_rule": FLOOR_GIVEAWAY_RULE, "floor_gives_away": None, "floor_giveaway_sentence": None}
    if LENGTH_ONLY in rows:
        r = rows[LENGTH_ONLY]
        out["gives_away"] = gives_away(r["auc"], r["auc_ci_low"])
        out["giveaway_sentence"] = giveaway_sentence(r["auc"], r["auc_ci_low"], r["auc_ci_high"])
    if FLOOR in rows:  # a floor that reads the outcome off the episode's shape leaves no judge to compare
        out["floor_gives_away"] = floor_gives_away(rows[FLOOR]["kappa"])
        out["floor_giveaway_sentence"] = floor_giveaway_sentence(rows[FLOOR]["kappa"])
    if FLOOR in rows and induced in rows and induced != FLOOR:
        f, j = rows[FLOOR], rows[induced]
        mc = f.get("mcnemar") or {}
        out["vs_floor"] = {"kappa_judge": j["kappa"], "kappa_floor": f["kappa"],
                           "false_pass_judge": j["false_pass_rate"], "false_pass_floor": f["false_pass_rate"],
                           "only_judge_right": mc.get("b"), "only_floor_right": mc.get("c"),
                           "p_value": mc.get("p_value"), "beats_floor": (mc.get("b") or 0) > (mc.get("c") or 0)}
    if HYBRID in rows and FLOOR in rows and induced in rows:
        h = rows[HYBRID]
        best_other = max(rows[induced]["accuracy"], rows[FLOOR]["accuracy"])
        out["hybrid_row"] = {"kappa": h["kappa"], "false_pass": h["false_pass_rate"],
                             "beats_both": bool(h["accuracy"] > best_other)}
    if not (out["floor"] and out["length_only"]):
        notes.append(NO_FLOOR_NOTE)
    return out
