"""Plant leak-test canaries in every non-observable field of SWE-agent ``.traj``, OpenHands and ATIF files.

Observable: the task message, the agent's thoughts, actions (minus bookkeeping arguments) and the
observations' text. Poisoned: SWE-agent ``info`` (submission, exit_status, model_stats), ``environment``,
``replay_config``, system and demonstration messages, the rest of ``history`` and the trajectory
entries' ``response``/``state``/timings; OpenHands ``test_result`` (with a ``resolved`` flag), ``report``,
``metadata``, ``metrics``, ``instance``, ``instruction``, ``error``, the system prompt, recall and
state-change events, observation ``extras``/summaries, tool-call metadata and bookkeeping arguments;
ATIF system steps, ``reasoning_content``, step/final metrics, ``agent.extra``/version and ``notes``.
These formats read no reward, so the trajectories stay unlabeled (the test checks that instead).
"""

from __future__ import annotations

import json
from pathlib import Path

from rubricforge_dspy.data.formats.openhands import SKIPPED_ACTIONS, SKIPPED_OBSERVATIONS
from rubricforge_dspy.data.formats.swe_agent import is_demonstration

CANARY = "CANARY7f3a"
SWE_FORMATS = ("swe_agent", "openhands", "atif")
_OH_BOOKKEEPING = ("impl_source", "confirmation_state", "security_risk", "translated_ipython_code",
                   "kernel_init_code", "blocking", "is_static", "hidden", "is_input", "cwd")


def poison_swe_agent(data: dict) -> dict:
    data = dict(data)
    data["info"] = {"submission": f"{CANARY}.submission", "exit_status": f"{CANARY}.exit_status",
                    "model_stats": {"instance_cost": f"{CANARY}.cost", "model": f"{CANARY}.model"},
                    "resolved": True, "report": f"{CANARY}.report"}
    data["environment"] = f"{CANARY}.environment"
    data["replay_config"] = f"{CANARY}.replay_config"
    history, task_seen = [], False
    for message in data.get("history") or []:
        message = dict(message)
        is_task = message.get("role") == "user" and not is_demonstration(message) and not task_seen
        if is_task:
            task_seen = True
        else:
            message["content"] = f"{CANARY}.history.{message.get('role')}"
        history.append(message)
    history.insert(1, {"role": "user", "content": f"{CANARY}.demo", "message_type": "demonstration", "agent": "main"})
    history.insert(1, {"role": "user", "content": f"{CANARY}.is_demo", "is_demo": True})
    data["history"] = history
    data["trajectory"] = [{**entry, "response": f"{CANARY}.response", "state": f"{CANARY}.state",
                           "execution_time": f"{CANARY}.time", "query": f"{CANARY}.query"}
                          for entry in data.get("trajectory") or []]
    return data


def poison_openhands_events(events: list) -> list:
    out = []
    for event in events:
        event = {**event, "timestamp": f"{CANARY}.ts", "tool_call_metadata": {"x": f"{CANARY}.tcm"},
                 "llm_metrics": {"cost": f"{CANARY}.metrics"}}
        if "action" in event:
            args = dict(event.get("args") or {})
            if event["action"] in SKIPPED_ACTIONS:
                args = {k: f"{CANARY}.{event['action']}.{k}" for k in args} or {"content": f"{CANARY}.x"}
                event["message"] = f"{CANARY}.message"
            for key in _OH_BOOKKEEPING:
                if key in args:
                    args[key] = f"{CANARY}.args.{key}"
            if event["action"] not in ("message", "finish"):
                event["message"] = f"{CANARY}.message"
            event["args"] = args
        elif "observation" in event:
            event["extras"] = {"note": f"{CANARY}.extras"}
            event["message"] = f"{CANARY}.summary"
            if event["observation"] in SKIPPED_OBSERVATIONS:
                event["content"] = f"{CANARY}.{event['observation']}"
        out.append(event)
    out.insert(0, {"id": -1, "source": "agent", "action": "system", "args": {"content": f"{CANARY}.system"}})
    out.append({"id": 10**6, "source": "environment", "observation": "agent_state_changed",
                "content": f"{CANARY}.state", "extras": {"agent_state": f"{CANARY}.finished"}})
    return out


def poison_openhands_record(record: dict) -> dict:
    poisoned = {key: {"resolved": True, "canary": f"{CANARY}.{key}"} for key in
                ("test_result", "report", "metadata", "metrics", "instance")}
    poisoned.update(instruction=f"{CANARY}.instruction", error=f"{CANARY}.error")
    return {**record, **poisoned, "history": poison_openhands_events(record["history"])}


def poison_atif(data: dict) -> dict:
    steps = []
    for step in data["steps"]:
        step = {**step, "metrics": {"cost_usd": f"{CANARY}.metrics"}, "reasoning_content": f"{CANARY}.reasoning",
                "timestamp": f"{CANARY}.ts", "extra": {"x": f"{CANARY}.extra"}}
        if step.get("source") == "system":
            step["message"] = f"{CANARY}.system"
        steps.append(step)
    steps.insert(0, {"step_id": 0, "source": "system", "message": f"{CANARY}.system2"})
    return {**data, "steps": steps, "agent": {**data.get("agent", {}), "extra": {"k": f"{CANARY}.agent_extra"},
                                               "version": f"{CANARY}.version"},
            "final_metrics": {"total_cost_usd": f"{CANARY}.final", "reward": 1.0}, "notes": f"{CANARY}.notes",
            "extra": {"success": True, "instruction": f"{CANARY}.extra"}}


def poison_swe_file(path: Path, fmt: str, target: Path) -> Path:
    """A poisoned copy of an SWE-agent / OpenHands file at ``target``, in the same container."""
    text = path.read_text()
    if fmt == "swe_agent":
        target.write_text(json.dumps(poison_swe_agent(json.loads(text))))
    elif fmt == "atif":
        target.write_text(json.dumps(poison_atif(json.loads(text))))
    elif text.lstrip().startswith("["):
        target.write_text(json.dumps(poison_openhands_events(json.loads(text))))
    else:
        target.write_text("".join(json.dumps(poison_openhands_record(json.loads(line))) + "\n"
                                  for line in text.splitlines() if line.strip()))
    return target
