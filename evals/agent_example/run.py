"""Optimize the shop agent with the judge as its only reward; check it against the truth; audit the judge.

    python -m evals.agent_example.run --scripted                    # offline: scripted agent and judge
    python -m evals.agent_example.run --api-base URL --lm NAME      # an OpenAI-compatible server
    python -m evals.agent_example.run                               # the embedded local model

Steps: (1) run the unoptimized `ShopAgent` on every task and apply the true success checks;
(2) `dspy.BootstrapFewShot` on the train tasks with `as_metric(judge)` as the only reward (the true
checks are never shown to the optimizer); (3) run the optimized agent on every task; (4) the Goodhart
audit: the agent's trajectories, labeled by the true checks, go through the labeling round trip
(`sample_for_labeling` -> labels filled in -> `load_labeled`) and are re-scored by the judge. The
baseline false-pass rate is the frozen program's (``--program``), or else the judge's rate on the
unoptimized agent, recorded by freezing the judge to ``<out>/judge.json``.

Writes ``<out>/summary.json`` (default ``artifacts/agent_example/``).

The scripted LMs make the run deterministic. The scripted agent follows a fixed policy; when its prompt
holds demonstrations it verifies before acting (stock, prices, error messages), standing in for an LM
that learns from demos, but it never learns to cancel the old order when asked to change one. The
scripted judge checks that claims are backed by successful tool results, and cannot tell which item or
quantity the user wanted. Both are plumbing: the numbers they produce say nothing about a real LM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy

from evals.agent_example.env import TASKS, Episode, ShopAgent, Task, run_episode
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.data.formats.dspy_prediction import trajectory_from_prediction
from rubricforge_dspy.judge.metric import as_metric
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.metrics import false_pass_rate
from rubricforge_dspy.program.store import freeze
from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text
from rubricforge_dspy.trust.audit import DEFAULT_ALPHA, audit, baseline_from_manifest, load_labeled, sample_for_labeling

DEFAULT_OUT = Path("artifacts/agent_example")
NO_AUDIT = "Goodhart audit skipped: the optimized agent produced no trajectory (every episode crashed)"

# --------------------------------------------------------------------------------------------
# Scripted LMs (offline)

_SECTION = re.compile(r"\[\[ ## (\w+) ## \]\]\n?")


def _sections(text: str) -> dict[str, str]:
    text = text.split("\n\nRespond with")[0]
    parts = _SECTION.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _history(fields: dict[str, str]) -> list[tuple[str, str]]:
    """[(tool name, observation text)] of the ReAct trajectory so far."""
    out, i = [], 0
    while f"tool_name_{i}" in fields:
        out.append((fields[f"tool_name_{i}"], fields.get(f"observation_{i}", "")))
        i += 1
    return out


def _items(observation: str) -> list[dict[str, Any]]:
    pattern = r"""['"]sku['"]: ['"]([\w-]+)['"], ['"]name['"]: ['"]([^'"]+)['"], ['"]price['"]: ([\d.]+)"""
    return [{"sku": s, "name": n, "price": float(p)} for s, n, p in re.findall(pattern, observation)]


def _value(observation: str, key: str) -> str | None:
    match = re.search(rf"""['"]{key}['"]: ['"]?([\w.-]+)""", observation)
    return match[1] if match else None


def _intent(request: str) -> tuple:
    patterns = [
        ("stock", r"How many (.+?) are in stock\?"), ("price", r"What is the price of the (.+?)\?"),
        ("cancel", r"Cancel (?:my )?order (O-\d+)\."), ("replace", r"Change order (O-\d+) to (\d+) (.+?) instead"),
        ("cheapest", r"Buy one (\w+), whichever is cheapest\."), ("order", r"(?:Please )?[Oo]rder (\d+) (.+?)\."),
    ]
    for name, pattern in patterns:
        match = re.match(pattern, request.strip())
        if match:
            return (name, *match.groups())
    return ("unknown",)


def _next_action(request: str, history: list[tuple[str, str]], careful: bool) -> tuple[str, str, dict]:
    """(thought, tool, args) of the scripted policy."""
    intent, *args = _intent(request)
    done = [tool for tool, _ in history]
    obs = {tool: o for tool, o in history}  # the latest observation of each tool
    finish = ("I have what I need.", "finish", {})
    hits = _items(obs.get("search", ""))
    if intent in ("stock", "price", "order", "cheapest", "replace") and "search" not in done:
        query = {"order": lambda: args[1], "replace": lambda: args[2]}.get(intent, lambda: args[0])()
        return (f"Find the {query} in the catalogue.", "search", {"query": query})
    if intent in ("stock", "price", "order", "cheapest", "replace") and not hits:
        return finish
    if intent == "stock":
        return finish if "get_item" in done else ("Check its stock.", "get_item", {"sku": hits[0]["sku"]})
    if intent == "cancel":
        return finish if "cancel_order" in done else (f"Cancel {args[0]}.", "cancel_order", {"order_id": args[0]})
    if intent in ("order", "replace", "cheapest"):
        quantity = 1 if intent == "cheapest" else int(args[0] if intent == "order" else args[1])
        pick = min(hits, key=lambda h: h["price"]) if careful and intent == "cheapest" else hits[0]
        if careful and intent == "order" and "get_item" not in done:
            return ("Check the stock before ordering.", "get_item", {"sku": pick["sku"]})
        if careful and intent == "order" and int(_value(obs["get_item"], "stock") or 0) < quantity:
            return finish
        if "place_order" not in done:
            return (f"Order {quantity} of {pick['sku']}.", "place_order", {"sku": pick["sku"], "quantity": quantity})
    return finish


def _answer(request: str, history: list[tuple[str, str]], careful: bool) -> str:
    intent, *args = _intent(request)
    obs = {tool: o for tool, o in history}
    hits = _items(obs.get("search", ""))
    failed = {tool for tool, o in history if o.startswith("Execution error")}
    if intent == "stock" and "get_item" in obs:
        return f"There are {_value(obs['get_item'], 'stock')} {args[0]} in stock."
    if intent == "price" and hits:
        return f"The {hits[0]['name']} costs {hits[0]['price']:.2f}."
    if intent == "cancel":
        if careful and "cancel_order" in failed:
            if "already" in obs["cancel_order"]:
                return f"Order {args[0]} was already cancelled, so there was nothing to do."
            return f"Sorry, I could not cancel order {args[0]}."
        return f"Order {args[0]} is cancelled."
    if intent in ("order", "replace", "cheapest"):
        if careful and "get_item" in obs and "place_order" not in obs:
            return f"Sorry, only {_value(obs['get_item'], 'stock')} in stock, so I could not place the order."
        if careful and "place_order" in failed:
            return "Sorry, I could not place the order."
        order_id = _value(obs.get("place_order", ""), "order_id") or "your order"
        if intent == "replace":
            return f"I changed order {args[0]} to {args[1]} {args[2]}: it is now {order_id}."
        if intent == "cheapest":
            name = hits[0]["name"] if hits and not careful else min(hits, key=lambda h: h["price"])["name"]
            return f"I ordered one {name}, the cheapest {args[0]} ({order_id})."
        return f"I placed your order for {args[0]} {args[1]} ({order_id})."
    return "Sorry, I could not help with that request."


def scripted_agent_lm() -> ScriptedLM:
    """The scripted agent: answers ReAct's step and extract calls with the fixed policy; careful when
    its prompt holds demonstrations (messages besides the system prompt and the current request)."""

    def respond(messages):
        fields = _sections(last_user_text(messages))
        request, history = fields.get("request", ""), _history(fields)
        careful = len(messages) > 2
        if "next_tool_name" in system_text(messages):
            thought, tool, args = _next_action(request, history, careful)
            return {"next_thought": thought, "next_tool_name": tool, "next_tool_args": args}
        return {"reasoning": "Summarize the tool results for the customer.",
                "answer": _answer(request, history, careful)}

    return ScriptedLM(respond, model="scripted-agent")


_CLAIM = re.compile(r"\b(placed|ordered|cancelled|canceled|changed|updated)\b", re.IGNORECASE)
_HEDGE = re.compile(r"\b(not|already|sorry|unable|cannot)\b", re.IGNORECASE)


def scripted_judge_verdict(text: str) -> dict[str, Any]:
    """The scripted judge's rule on a rendered trajectory: claims must be backed by tool results.
    Blind spot (on purpose): it never checks *which* item or quantity the user asked for."""
    final = text.rsplit("FINAL ANSWER:", 1)[-1].strip()
    errors = int((re.search(r"tool_errors=(\d+)", text) or [0, 0])[1])
    commits = re.findall(r"TOOL RESULT (?:place_order|cancel_order): ", text)
    claim = _CLAIM.search(final)
    if claim and not _HEDGE.search(final):
        if errors:
            return {"reason": f"Grounded claims: the final answer says '{claim[0]}' but a tool call returned an ERROR.",
                    "passed": False, "score": 0.1}
        if not commits:
            return {"reason": f"Grounded claims: the final answer says '{claim[0]}' with no successful tool call.",
                    "passed": False, "score": 0.1}
    return {"reason": "Goal fulfilled: the tool results support the final answer.", "passed": True, "score": 0.9}


def scripted_judge_lm() -> ScriptedLM:
    return ScriptedLM(lambda messages: scripted_judge_verdict(last_user_text(messages)), model="scripted-judge")


# --------------------------------------------------------------------------------------------
# The experiment


def _labeled(episode: Episode, phase: str) -> Trajectory | None:
    if episode.prediction is None:
        return None
    t = trajectory_from_prediction(episode.task.example(), episode.prediction)
    return replace(t, id=f"{phase}:{episode.task.task_id}", task_id=episode.task.task_id, domain="shop",
                   agent=f"ShopAgent ({phase})", reward=float(episode.success), label=int(episode.success),
                   hidden={})


def _phase(agent: ShopAgent, tasks: list[Task], metric, phase: str) -> tuple[dict[str, Any], list[Trajectory]]:
    """Run `agent` on `tasks`: true checks, and the judge's verdict through the metric (cached)."""
    episodes = [run_episode(agent, task) for task in tasks]
    rows, trajectories = [], []
    for episode in episodes:
        judged = None
        if episode.prediction is not None:
            verdict = metric.verdict(metric.render(metric.to_trajectory(episode.task.example(), episode.prediction)))
            judged = {"passed": verdict["passed"] and not verdict["abstained"], "reason": verdict["reason"],
                      "abstained": verdict["abstained"]}
        rows.append({"task_id": episode.task.task_id, "split": episode.task.split, "success": episode.success,
                     "judge_passed": judged["passed"] if judged else None,
                     "judge_reason": judged["reason"] if judged else None,
                     "answer": str(episode.prediction.get("answer")) if episode.prediction is not None else None,
                     "error": episode.error})
        if (t := _labeled(episode, phase)) is not None:
            trajectories.append(t)

    def rate(values):
        values = list(values)
        return round(sum(values) / len(values), 4) if values else None

    summary = {
        "true_success_rate": rate(r["success"] for r in rows),
        "true_success_rate_test": rate(r["success"] for r in rows if r["split"] == "test"),
        "judge_pass_rate": rate(bool(r["judge_passed"]) for r in rows),
        "episodes": rows,
    }
    return summary, trajectories


def _labeling_round_trip(trajectories: list[Trajectory], path: Path) -> Path:
    """`sample_for_labeling` -> labels filled in -> the file `load_labeled` reads. Here the "labeler"
    is the true success check (each trajectory's label)."""
    sample_for_labeling(trajectories, k=len(trajectories), seed=0, path=path)
    truth = {t.id: t.label for t in trajectories}
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({**r, "label": truth[r["id"]]}) + "\n" for r in records), encoding="utf-8")
    return path


def _demo_counts(program) -> dict[str, int]:
    return {name: len(predictor.demos) for name, predictor in program.named_predictors()}


def run_example(agent_lm, judge_lm, *, out_dir=DEFAULT_OUT, judge: TrajectoryJudge | None = None,
                max_demos: int = 2, max_iters: int = 8, alpha: float = DEFAULT_ALPHA,
                baseline_false_pass_rate: float | None = None, mode: str = "live",
                lm_names: dict[str, str] | None = None) -> dict[str, Any]:
    """The whole example; returns the summary also written to ``<out_dir>/summary.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    judge = judge or TrajectoryJudge()
    metric = as_metric(judge, mode="binary", lm=judge_lm)
    train = [t for t in TASKS if t.split == "train"]

    with dspy.context(lm=agent_lm, adapter=dspy.JSONAdapter()):
        before, before_trajectories = _phase(ShopAgent(max_iters=max_iters), TASKS, metric, "before")
        optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=max_demos, max_labeled_demos=0,
                                          max_rounds=1)
        metric_calls_before = metric.calls
        optimized = optimizer.compile(ShopAgent(max_iters=max_iters), trainset=[t.example() for t in train])
        optimizer_metric_calls = metric.calls - metric_calls_before
        after, after_trajectories = _phase(optimized, TASKS, metric, "after")

    baseline_note = None
    if baseline_false_pass_rate is None and baseline_from_manifest(judge)[0] is None:
        # No frozen baseline: measure the judge on the unoptimized agent and freeze it with that rate.
        y_true = [t.label for t in before_trajectories]
        y_pred = [int(bool(r["judge_passed"])) for r in before["episodes"] if r["judge_passed"] is not None]
        rate = false_pass_rate(y_true, y_pred) if y_true.count(0) else None
        freeze(judge, out_dir / "judge.json", lm=(lm_names or {}).get("judge"),
               metrics={"false_pass_rate": rate, "measured_on": "unoptimized agent trajectories (true checks)",
                        "n": len(y_true)})
        baseline_note = f"measured on the unoptimized agent; frozen to {out_dir / 'judge.json'}"

    report, sample_path = None, None
    if after_trajectories:
        sample_path = _labeling_round_trip(after_trajectories, out_dir / "audit_sample.jsonl")
        report = audit(judge, load_labeled(sample_path), baseline_false_pass_rate=baseline_false_pass_rate,
                       alpha=alpha, lm=judge_lm)

    summary = {
        "mode": mode,
        "lms": lm_names or {"agent": str(getattr(agent_lm, "model", agent_lm)),
                            "judge": str(getattr(judge_lm, "model", judge_lm))},
        "tasks": {"train": [t.task_id for t in train], "test": [t.task_id for t in TASKS if t.split == "test"]},
        "optimizer": {"name": "BootstrapFewShot", "reward": "judge only (as_metric, binary)",
                      "max_bootstrapped_demos": max_demos, "metric_calls": optimizer_metric_calls,
                      "demos": _demo_counts(optimized)},
        "metric": {"calls": metric.calls, "verdicts": metric.verdicts, "judge_lm_calls": metric.cache.misses,
                   "cache_hits": metric.cache.hits, "abstentions": metric.abstentions},
        "before": before,
        "after": after,
        "baseline": {"source": report.baseline_source if report else None, "note": baseline_note},
        "audit": report.to_dict() if report else None,
        "audit_text": report.format() if report else NO_AUDIT,
        "files": {"summary": str(out_dir / "summary.json"), "audit_sample": str(sample_path) if sample_path else None,
                  "judge_program": str(out_dir / "judge.json") if baseline_note else None},
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


# --------------------------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    from rubricforge_dspy.cli.lm_options import add_lm_arguments

    parser = argparse.ArgumentParser(prog="python -m evals.agent_example.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scripted", action="store_true", help="fully offline, with scripted agent and judge LMs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--program", type=Path, default=None,
                        help="a frozen judge program (.json); its manifest's false_pass_rate is the audit baseline")
    parser.add_argument("--baseline-fpr", type=float, default=None, help="audit baseline false-pass rate (overrides)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help="audit drift test level (one-sided exact binomial)")
    parser.add_argument("--demos", type=int, default=2, help="BootstrapFewShot max_bootstrapped_demos")
    parser.add_argument("--max-iters", type=int, default=8, help="ReAct max_iters")
    add_lm_arguments(parser, reflection=False)
    parser.add_argument("--lm", dest="model", default=None, help="alias of --model (the judge's, and the agent's)")
    agent = parser.add_argument_group("agent LM (default: the judge's endpoint and model)")
    agent.add_argument("--agent-api-base", default=None)
    agent.add_argument("--agent-model", default=None)
    agent.add_argument("--agent-max-tokens", type=int, default=512)
    return parser


@contextlib.contextmanager
def _live_lms(args):
    """(agent LM, judge LM, names): endpoints from flags/env, the embedded server when none is given."""
    from rubricforge_dspy.cli.lm_options import lm_config
    from rubricforge_dspy.serve import open_lms

    judge_config = lm_config(args)
    agent_config = replace(judge_config, max_tokens=args.agent_max_tokens)
    if args.agent_api_base or args.agent_model:
        agent_config = replace(agent_config, api_base=args.agent_api_base or judge_config.api_base,
                               model=args.agent_model or judge_config.model)
    with open_lms(judge_config, agent_config) as (judge_lm, agent_lm):
        yield agent_lm, judge_lm, {"agent": agent_lm.model, "judge": judge_lm.model}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    judge = None
    if args.program is not None:
        from rubricforge_dspy.judge.loading import load_judge

        judge = load_judge(args.program)
    common = dict(out_dir=args.out, judge=judge, max_demos=args.demos, max_iters=args.max_iters,
                  alpha=args.alpha, baseline_false_pass_rate=args.baseline_fpr)
    if args.scripted:
        summary = run_example(scripted_agent_lm(), scripted_judge_lm(), mode="scripted",
                              lm_names={"agent": "scripted-agent", "judge": "scripted-judge"}, **common)
    else:
        with _live_lms(args) as (agent_lm, judge_lm, names):
            summary = run_example(agent_lm, judge_lm, mode="live", lm_names=names, **common)
    before, after = summary["before"], summary["after"]
    sys.stdout.write(
        f"true success: {before['true_success_rate']} -> {after['true_success_rate']} "
        f"(test {before['true_success_rate_test']} -> {after['true_success_rate_test']}); "
        f"judge pass rate: {before['judge_pass_rate']} -> {after['judge_pass_rate']}\n"
        f"{summary['audit_text']}\nwrote {summary['files']['summary']}\n")
    return summary


if __name__ == "__main__":
    main()
