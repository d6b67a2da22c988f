"""What the report says before its first table: what the embedded model can and cannot tell (when the run's judge
LM is the embedded one), and what each judge row is, one line per row, in the order the tables list them.

The definitions say what the code that writes each row does (`pipeline.protocol`, `judge.baselines`,
`judge.floor`, `judge.hybrid`); a judge name without a definition here is said to be undefined, so a new row is
seen at once (``tests/report/test_report_definitions.py``). Rows of plain verdict files (``rubricforge report
--predictions A.jsonl B.jsonl``) are the files' verdicts: nothing records what judged them but their lines.
"""

from __future__ import annotations

from typing import Any

from rubricforge_dspy.core.judge_names import FLOOR, HYBRID, LENGTH_ONLY
from rubricforge_dspy.report.cells import cell

__all__ = ["JUDGE_DEFINITIONS", "UNDEFINED", "EMBEDDED_CAVEAT_TITLE", "judge_definitions", "caveat_section",
           "definitions_section", "LLM_JUDGES"]

# the rows the evaluation protocol writes (`pipeline.protocol.JUDGES`), each in one line; `{fit}` is where the
# floor's rows were fit, `{k}` the few-shot demos
JUDGE_DEFINITIONS: dict[str, str] = {
    "oracle": ("the environment's own outcome given back as a verdict (passed = the label, score = the reward "
               "clipped to [0, 1]); no LM. The ceiling and a check of the scoring, not a judge: its verdict is the "
               "label, so its row has no false pass and no false fail."),
    "induced": ("the LLM judge with the rubric GEPA induced on the training split and chose on the validation "
                "split (the seed rubric when no candidate beat it: see \"The induced judge\"), frozen, then run once "
                "on the test split. Every McNemar column and every Δ compares a row with it."),
    HYBRID: ("the induced judge's score stacked with the symptom floor's observable features in one logistic "
             "regression fit on the induced judge's validation verdicts; no extra LM call (computed from the "
             "induced judge's test verdicts)."),
    "geval": ("the LLM judge with the generic seed rubric (G-Eval-style evaluation steps: list the user's goals, find "
              "the tool results for each, check each criterion; `core.rubric.SEED_RUBRIC`), no induction: the "
              "baseline induction must beat (the false-pass gap and the disagreements compare with it)."),
    "fewshot": ("the seed rubric with {k} labeled training trajectories shown as worked examples (passed and "
                "failed ones alternating while both last, seeded), no induction."),
    "heuristic": ("a fixed surface rule, no LM (`evidence.symptoms.heuristic_verdict`): fail on a claimed action no "
                  "tool result backs, success claimed after a failed commit, no final answer, or more than a third of "
                  "the tool calls erroring; otherwise pass exactly when a state-changing call succeeded."),
    FLOOR: ("the symptom floor: a class-balanced logistic regression on observable counts (tool errors, failed and "
            "successful commits, unbacked claims, repeated calls, the final answer, steps, user turns, tool calls), "
            "{fit}; no LM. What any judge must beat."),
    LENGTH_ONLY: ("the same logistic regression on the number of steps and user turns alone, {fit}; no LM: whether "
                  "episode length alone gives the outcome away."),
    "majority": ("the training split's majority class given to every item (score: the training pass rate); no LM: "
                 "what knowing the base rate alone scores."),
}
# the rows whose verdicts come from the judge LM (the caveat counts their verdicts)
LLM_JUDGES = ("induced", "geval", "fewshot", HYBRID)
UNDEFINED = "no definition: this report does not know what wrote these verdicts"
EMBEDDED_CAVEAT_TITLE = "## Read this first: what the embedded 135M model can and cannot tell"


def _protocol(report: dict[str, Any]) -> bool:
    """A run directory the evaluation protocol wrote (its run.json records the split), not plain verdict files."""
    return report["meta"].get("split") is not None


def judge_definitions(report: dict[str, Any]) -> dict[str, str]:
    """Each judge row's one-line definition, in the order of the report's rows."""
    meta = report["meta"]
    config = meta.get("config") or {}
    protocol = _protocol(report)
    fit = ("fit on the training split" if protocol else
           "fit by task-grouped cross-validation on the judged items (`--floor-data`)")
    out = {}
    for judge in meta.get("judges") or []:
        if protocol and judge in JUDGE_DEFINITIONS:
            text = JUDGE_DEFINITIONS[judge].format(fit=fit, k=config.get("fewshot_k", "k"))
        elif judge in (FLOOR, LENGTH_ONLY):  # added to verdict files by `--floor-data`
            text = JUDGE_DEFINITIONS[judge].format(fit=fit, k="k")
        elif not protocol:
            text = (f"the verdicts of the file `{cell(judge)}.jsonl` (a row is named after its file); what judged "
                    "them is what the lines' `model` records")
            if judge == meta.get("induced"):
                text += "; the reference the other rows are compared with (the first file given)"
        else:
            text = UNDEFINED
        out[judge] = text
    return out


def definitions_section(report: dict[str, Any]) -> list[str]:
    """``## The rows of the tables``: every judge row defined in one line, before the first table."""
    defined = judge_definitions(report)
    if not defined:
        return []
    return ["## The rows of the tables", "",
            *(f"- `{cell(judge)}`: {text}" for judge, text in defined.items()), ""]


def _verdict_counts(report: dict[str, Any]) -> list[str]:
    """For each LLM row of the main table: how many items it passed, and whether it said one thing to all."""
    rows = {r["judge"]: r for r in report.get("main") or []}
    out = []
    for judge in LLM_JUDGES:
        r = rows.get(judge)
        if r is None or not r.get("n"):
            continue
        n = int(r["n"])
        passed = int(r["tp"]) + int(r["fp"])
        same = " (the same verdict for every item)" if passed in (0, n) else ""
        out.append(f"`{judge}` passed {passed} of {n}{same}")
    return out


def caveat_section(report: dict[str, Any]) -> list[str]:
    """What the embedded model can and cannot tell: the report's opening, before any table. Nothing unless the
    run's judge LM is the embedded model (the report's ``meta.embedded``: run.json's, or its cascade fit's)."""
    meta = report["meta"]
    if not meta.get("embedded"):
        return []
    counts = _verdict_counts(report)
    n = report["items"]["n"]
    said = (f" Here, on {n} test item(s): {'; '.join(counts)}." if counts else "")
    return [
        EMBEDDED_CAVEAT_TITLE, "",
        "The judge LM of this run is the embedded SmolLM2-135M-Instruct, a 135M-parameter model running on the CPU. "
        "It is plumbing, not a judge.", "",
        "- **It can tell** that the whole pipeline runs end to end on this machine with no API key: rendering, "
        "structured verdicts, GEPA reflection, freezing, the cascade fit, this report, and what each step costs "
        "(\"Where the time went\"). The rows that use no LM (`oracle`, `floor`, `length_only`, `heuristic`, "
        "`majority`) are computed exactly as they would be with any judge: with a real model only the LLM rows "
        "change.",
        "- **It cannot tell** whether a rubric, induction or any LLM judge is any good. Its verdicts (the rows "
        "`induced`, `geval`, `fewshot` and `hybrid` when present) are near chance and barely depend on the "
        f"rubric; their κ, AUC, McNemar tests and the induced rubric's sweep say nothing about the method.{said} "
        "On a few test items every interval spans most of [0, 1] as well.",
        "- **For numbers that mean something**, run the same command against a real model: `rubricforge demo "
        "--api-base http://127.0.0.1:30000/v1 --model Qwen2.5-7B-Instruct@main --tasks 50 --budget 200`.", ""]
