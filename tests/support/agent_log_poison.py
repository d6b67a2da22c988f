"""Plant leak-test canaries in every non-observable field of Inspect AI logs and mini-SWE-agent trajectories.

Observable: the user/assistant/tool messages (minus system messages; mini-SWE ``exit`` messages hidden).
Poisoned, Inspect: the scores (the first scorer's value becomes the canary reward, its answer/explanation
canaries), target, metadata, store, the output's usage, model_usage, the eval header's metadata, the
system messages. mini-SWE: the whole ``info`` (submission, exit_status, model_stats, config), the system
message, an ``exit`` message with the submission. A mini-SWE file has no outcome, so no canary reward is
read from it (`NO_OUTCOME_FORMATS`).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

CANARY = "CANARY7f3a"
CANARY_REWARD = 0.7315926
AGENT_LOG_FORMATS = ("inspect", "mini_swe")
NO_OUTCOME_FORMATS = ("mini_swe",)


def _poison_messages(messages: list[dict]) -> list[dict]:
    return [m if m.get("role") != "system" else {**m, "content": f"{CANARY}.system"} for m in messages]


def poison_inspect_sample(sample: dict) -> dict:
    out = dict(sample)
    out["scores"] = {"canary_scorer": {"value": CANARY_REWARD, "answer": f"{CANARY}.answer",
                                       "explanation": f"{CANARY}.explanation", "metadata": {"m": f"{CANARY}.sm"}}}
    for key in ("target", "metadata", "store"):
        out[key] = f"{CANARY}.{key}" if key == "target" else {"k": f"{CANARY}.{key}"}
    out["model_usage"] = {"m": {"input_tokens": CANARY_REWARD, "note": f"{CANARY}.model_usage"}}
    if isinstance(out.get("output"), dict):
        out["output"] = {**out["output"], "usage": {"note": f"{CANARY}.usage"}}
    out["messages"] = _poison_messages(out.get("messages") or []) + [{"role": "system", "content": f"{CANARY}.sys2"}]
    return out


def _poison_header(header: dict) -> dict:
    ev = dict(header.get("eval") or {})
    ev["metadata"] = {"k": f"{CANARY}.eval_metadata"}
    return {**header, "eval": ev, "results": {"note": f"{CANARY}.results"}}


def poison_mini_swe(data) -> dict:
    messages = data["messages"] if isinstance(data, dict) else data
    info = {"instance_id": "canary__instance-1", "exit_status": f"{CANARY}.exit_status",
            "submission": f"{CANARY}.submission",
            "model_stats": {"instance_cost": CANARY_REWARD, "api_calls": f"{CANARY}.api_calls"},
            "config": {"agent": {"system_template": f"{CANARY}.template"}}, "mini_version": f"{CANARY}.v"}
    return {"info": info, "trajectory_format": "mini-swe-agent-1.1",
            "messages": _poison_messages(messages) + [{"role": "exit", "content": f"{CANARY}.exit_message"}]}


def poison_agent_log(path: Path, fmt: str, target: Path) -> Path:
    """Write a poisoned copy of ``path`` (format ``fmt``) to ``target``; returns ``target``."""
    if fmt == "mini_swe":
        target.write_text(json.dumps(poison_mini_swe(json.loads(path.read_text()))))
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(target, "w") as dst:
            for name in src.namelist():
                data = src.read(name)
                if name == "header.json":
                    data = json.dumps(_poison_header(json.loads(data))).encode()
                elif name.startswith("samples/"):
                    data = json.dumps(poison_inspect_sample(json.loads(data))).encode()
                elif name.endswith(".json"):
                    data = json.dumps({"note": f"{CANARY}.{name}"}).encode()  # summaries hold scores too
                dst.writestr(name, data)
    else:
        log = json.loads(path.read_text())
        log = {**_poison_header(log), "samples": [poison_inspect_sample(s) for s in log["samples"]],
               "reductions": [{"note": f"{CANARY}.reductions"}]}
        target.write_text(json.dumps(log))
    return target
