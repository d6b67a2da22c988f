"""The cascade's records below every stage that reads them (`apply`, `trust`, `report`, `review`): the escalation
marker, the token and judge-verdict tallies of a cascade run and of its verdict lines, and the label-rule check.

``ESCALATED`` is the ``stage`` of a verdict line no stage decided and the error kind of its abstention
(`core.verdict.ERROR_KINDS`): defined once, here.

A fitted cascade's guarantee records the label rule its calibration labels were made with (``label_rule``:
``rules``, ``source``, ``labels``; `trust.cascade.fit_cascade`): a disagreement certified under "reward > 0" says
nothing about labels made by "reward >= 1". `cascade_label_rule` is the one place that applies it wherever labels
are read against a cascade (``judge --cascade``, ``certify`` of a cascade, ``report`` of a cascade's verdicts):
no rule given -> the cascade's; the same rule -> as given; another rule -> refused (`LabelRuleMismatchError`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import LabelRule, parse_label_rule

__all__ = ["ESCALATED", "TOKEN_KEYS", "token_spend", "format_token_spend", "format_judge_verdicts",
           "line_judge_verdicts", "line_tokens", "LabelRuleMismatchError", "cascade_label_rule"]

ESCALATED = "escalated"
TOKEN_KEYS = ("prompt_tokens", "completion_tokens")


def token_spend(tokens: Mapping[str, int] | None, lm_items: int, n: int, unreported: int = 0) -> dict[str, Any]:
    """The LM tokens a cascade spent, and an estimate of what judging all `n` items with the LLM would cost.

    Args:
        tokens: prompt and completion tokens summed over the LM-judged items that reported usage (None: no
            usage reported).
        lm_items: the items those tokens are of (LM-judged, usage reported).
        n: all items.
        unreported: LM-judged items whose LM reported no usage (not in `tokens`).

    Returns:
        ``tokens`` (with ``total_tokens``), ``lm_items``, ``unreported``, and ``estimate_judging_everything``:
        tokens per LM-judged item times `n`, per kind and in total (None when no LM-judged item reported
        usage), with ``per_item``. An estimate, not a measurement: the items the earlier stages decided may
        be shorter or longer than the ones that reached the LM.
    """
    tokens = None if tokens is None else {k: int(tokens.get(k) or 0) for k in TOKEN_KEYS}
    if tokens is not None:
        tokens["total_tokens"] = tokens["prompt_tokens"] + tokens["completion_tokens"]
    estimate = None
    if tokens is not None and lm_items > 0:
        per_item = {k: tokens[k] / lm_items for k in (*TOKEN_KEYS, "total_tokens")}
        estimate = {**{k: round(per_item[k] * n) for k in per_item}, "per_item": round(per_item["total_tokens"], 1),
                    "basis": f"{n} items x the mean tokens of the {lm_items} LM-judged item(s)"}
    return {"tokens": tokens, "lm_items": lm_items, "unreported": unreported, "estimate_judging_everything": estimate}


def format_token_spend(spend: Mapping[str, Any] | None, lm_calls: int) -> str:
    """One line: the tokens spent and the estimate of judging everything with the last stage."""
    if not spend or lm_calls == 0:
        return "LM tokens: 0 (no LM call)"
    tokens = spend.get("tokens")
    if tokens is None:
        return f"LM tokens: not reported by the LM ({lm_calls} LM call(s))"
    text = (f"LM tokens: {tokens['total_tokens']:,} (prompt {tokens['prompt_tokens']:,}, completion "
            f"{tokens['completion_tokens']:,})")
    if spend.get("unreported"):
        text += f", {spend['unreported']} LM-judged item(s) without reported usage not counted"
    estimate = spend.get("estimate_judging_everything")
    if estimate:
        text += (f"; judging everything with the last stage: about {estimate['total_tokens']:,} (estimate: "
                 f"{estimate['basis']}, {estimate['per_item']:,} each)")
    return text


def format_judge_verdicts(needed: int, n: int) -> str:
    """The cost of a cascade as a user pays it, in one line: ``judge verdicts needed: 101 of 188 (46% saved)``.

    A judge verdict is one item a judge stage ran on (an LLM stage's call, a recorded stage's verdict of another
    tool, a Python stage's answer; `judge.contract.BaseJudge.gives_judge_verdicts`), against `n`: judging every item
    with the judge alone. The saved share is ``(n - needed) / n`` (negative when several judge stages ran on the
    same items: said, never hidden)."""
    if not n:
        return f"judge verdicts needed: {needed} of 0"
    return f"judge verdicts needed: {needed} of {n} ({(n - needed) / n:.0%} saved)"


def line_judge_verdicts(lines: Iterable[Mapping[str, Any]], stages: Sequence[str], judge_stages: Iterable[str]) -> int:
    """The judge verdicts a cascade's verdict lines needed: per line, the judge stages (`judge_stages`, names in
    `stages`' order) at or before the stage that settled it (``stage``; an escalated line went through every
    stage; a failed line stopped at the stage that failed).

    Raises:
        InputError: a line names a stage that is not among `stages` (a verdict file of another cascade).
    """
    order = {name: k for k, name in enumerate(stages)}
    judges = sorted(order[name] for name in judge_stages if name in order)
    needed = 0
    for line in lines:
        stage = line.get("stage")
        if stage == ESCALATED:
            needed += len(judges)
            continue
        if stage not in order:
            ident, named = str(line.get("id"))[:80], str(stage)[:80]
            raise InputError(f"a cascade verdict line (id {ident!r}) names stage {named!r}, not one of the job's "
                             f"stages {list(stages)}: the verdict file and its job file are of different cascades; "
                             "judge again into a new file")
        needed += sum(k <= order[stage] for k in judges)
    return needed


def line_tokens(lines: Iterable[Mapping[str, Any]]) -> tuple[dict[str, dict[str, int]], dict[str, int], int, int]:
    """Tokens from cascade verdict lines (``lm_tokens``: stage -> prompt/completion tokens of its LM call on the
    item): per stage, in total, the LM-judged items that reported usage and those that did not."""
    by_stage: dict[str, dict[str, int]] = {}
    total = dict.fromkeys(TOKEN_KEYS, 0)
    items = unreported = 0
    for line in lines:
        spent = line.get("lm_tokens") or {}
        if not spent:
            unreported += int(line.get("lm_stages_run") or 0) > 0
            continue
        items += 1
        for stage, used in spent.items():
            row = by_stage.setdefault(stage, {**dict.fromkeys(TOKEN_KEYS, 0), "items": 0})
            row["items"] += 1
            for key in TOKEN_KEYS:
                row[key] += int(used.get(key) or 0)
                total[key] += int(used.get(key) or 0)
    return by_stage, total, items, unreported


class LabelRuleMismatchError(InputError):
    """Labels asked for under another rule than the one a cascade was certified with (exit 2)."""


def cascade_label_rule(guarantee: Mapping[str, Any] | None, given: LabelRule | str | float | None,
                       what: str = "the cascade") -> tuple[LabelRule | str | float | None, str | None]:
    """The label rule to read labels with against a cascade, and a line saying so.

    Args:
        guarantee: the cascade's guarantee (``Cascade.guarantee``; None: hand-set).
        given: the rule the user gave (``--label-threshold``; None: none given).
        what: the cascade, as the messages name it.

    Returns:
        ``(rule, note)``: the cascade's rule when none is given (None when the fit used several formats' own
        rules: each format's own, as at the fit), else `given`; `note` says which rule is used and why (None
        when the cascade records no rule: a hand-set cascade, or one fit before rules were recorded).

    Raises:
        LabelRuleMismatchError: `given` is not the cascade's rule (a disagreement certified under one rule says
            nothing about labels made by another); the message names both.
    """
    record = (guarantee or {}).get("label_rule") if isinstance(guarantee, Mapping) else None
    if not isinstance(record, Mapping) or not record.get("rules"):
        return given, None
    rules = [str(rule) for rule in record["rules"]]
    fitted = "; ".join(rules)
    if given is not None:
        given_text = str(parse_label_rule(given))
        if rules != [given_text]:
            raise LabelRuleMismatchError(
                f"--label-threshold gives labels by {given_text}, but {what} was certified with labels by {fitted}: "
                f"its guarantee means nothing under another rule; drop --label-threshold (the cascade's rule is "
                f"used) or re-fit the cascade with `rubricforge cascade fit --label-threshold ...`")
        return parse_label_rule(given), f"labels: {given_text}, the rule {what} was certified with"
    if len(rules) == 1:
        return (parse_label_rule(rules[0]),
                f"labels: {rules[0]}, the rule {what} was certified with (no --label-threshold given)")
    return None, f"labels: each format's own rule ({fitted}), as when {what} was certified"

