"""A live DSPy run as a `Trajectory`: the loader for an agent program's `dspy.Prediction`.

`trajectory_from_prediction(example, pred, trace)` reads what the agent did (a `dspy.ReAct` prediction's
``trajectory`` dict of thoughts, tool calls and observations, or the program's trace, or its output
fields) into observable steps; it is what the judge-as-metric (`judge.metric`) renders and judges.

The outcome of a fresh agent run is exactly what is unknown here, so the trajectory is unlabeled
(``label=None, reward=None``); the renderer reads only ``steps``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable

from rubricforge_dspy._dspy_compat import input_keys
from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.data.formats import looks_like_tool_error

if TYPE_CHECKING:
    import dspy

__all__ = ["trajectory_from_prediction", "is_error_observation", "condense_error", "FINISH_TOOL",
           "REACT_ERROR_PREFIX", "SOURCE_FILE"]

FINISH_TOOL = "finish"
REACT_ERROR_PREFIX = "Execution error in "  # how dspy/predict/react.py reports a tool that raised
NON_ANSWER_KEYS = ("trajectory", "reasoning")
SOURCE_FILE = "<dspy prediction>"




def is_error_observation(tool_name: str | None, observation: Any) -> bool:
    """True when a ReAct observation reports a failure: DSPy's ``Execution error in <tool>: ...``
    (the tool raised) or a tool that returned an ``Error: ...`` string."""
    if not isinstance(observation, str):
        return False
    return observation.startswith(REACT_ERROR_PREFIX) or looks_like_tool_error(observation)


def condense_error(observation: str) -> str:
    """``Execution error in <tool>: <traceback>`` -> ``Execution error in <tool>: <exception line>``.

    DSPy appends up to five traceback frames (file paths of the agent's own code); the judge needs the
    exception, not the frames, and the frames would eat the render budget."""
    if not observation.startswith(REACT_ERROR_PREFIX) or "Traceback (most recent call last)" not in observation:
        return observation
    head = observation.split(":", 1)[0]
    lines = [line.strip() for line in observation.splitlines() if line.strip()]
    return f"{head}: {lines[-1]}" if lines else observation


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _fields_text(fields: dict[str, Any]) -> str:
    """One field: its value. Several: ``name: value`` lines, in order."""
    if len(fields) == 1:
        return _text(next(iter(fields.values())))
    return "\n".join(f"{name}: {_text(value)}" for name, value in fields.items())


def _input_fields(example: dspy.Example, input_fields: Iterable[str] | None) -> dict[str, Any]:
    if input_fields is not None:
        return {name: example[name] for name in input_fields if name in example}
    if input_keys(example) is None:
        raise ValueError("the example has no input keys: call example.with_inputs(...) (or pass input_fields=) so "
                         "the judge sees the request and never the example's labels")
    return dict(example.inputs().items())


def _output_fields(pred: dspy.Prediction) -> dict[str, Any]:
    return {k: v for k, v in pred.items() if k not in NON_ANSWER_KEYS}


def _react_steps(trajectory: dict[str, Any], is_error: Callable[[str | None, Any], bool]) -> list[Step]:
    indices = sorted({int(m[1]) for key in trajectory if (m := re.fullmatch(r"tool_name_(\d+)", key))})
    steps: list[Step] = []
    for i in indices:
        thought = trajectory.get(f"thought_{i}")
        if thought and str(thought).strip():
            steps.append(Step("assistant", str(thought).strip()))
        tool = trajectory.get(f"tool_name_{i}")
        if tool == FINISH_TOOL:
            continue  # ReAct's end-of-episode signal; its observation is always "Completed."
        call_id = f"react_{i}"
        steps.append(Step("tool_call", tool_name=str(tool), arguments=trajectory.get(f"tool_args_{i}") or {},
                          call_id=call_id))
        if f"observation_{i}" in trajectory:
            observation = trajectory[f"observation_{i}"]
            error = bool(is_error(tool, observation))
            content = condense_error(observation) if error and isinstance(observation, str) else _text(observation)
            steps.append(Step("tool_result", content=content, tool_name=str(tool), call_id=call_id, is_error=error))
    return steps


def _trace_steps(trace: Iterable[Any] | None, final_outputs: dict[str, Any]) -> list[Step]:
    """Intermediate predictor outputs of a generic program, as assistant turns."""
    steps: list[Step] = []
    for entry in trace or []:
        try:
            _, _, raw = entry
            outputs = dict(raw.items())
        except (TypeError, ValueError, AttributeError):
            continue
        if final_outputs and {k: outputs.get(k) for k in final_outputs} == final_outputs:
            continue  # the call that produced the final answer
        if outputs:
            steps.append(Step("assistant", _fields_text(outputs)))
    return steps


def trajectory_from_prediction(example: dspy.Example, pred: dspy.Prediction, trace: Iterable[Any] | None = None,
                               *, input_fields: list[str] | None = None,
                               is_error: Callable[[str | None, Any], bool] = is_error_observation,
                               domain: str = "dspy") -> Trajectory:
    """The observable episode of one program run, as a `Trajectory` the judge can read.

    - user: the example's input fields (``example.inputs()``; or ``input_fields``). Labels are never read.
    - `dspy.ReAct` predictions (``pred.trajectory`` with ``thought_i, tool_name_i, tool_args_i,
      observation_i``): each thought -> assistant, each tool -> tool_call + tool_result (``is_error`` for
      ``Execution error in <tool>: ...`` and ``Error: ...`` observations, DSPy's traceback condensed to
      the exception line); the ``finish`` tool is dropped.
    - any other prediction: its ``reasoning`` (if any) -> assistant; with a `trace`, the outputs of the
      intermediate predictor calls -> assistant turns (ReAct predictions ignore the trace: their
      ``trajectory`` is already complete).
    - final_answer: the output fields (everything but ``trajectory`` and ``reasoning``).

    The trajectory is unlabeled (``label=None, reward=None``). The id is a hash of the steps, so
    identical runs get identical ids.
    """
    if pred is None:
        raise ValueError("no prediction to judge (the program returned None)")
    request = _input_fields(example, input_fields)
    steps: list[Step] = [Step("user", _fields_text(request) if request else "(no input)")]
    react = getattr(pred, "trajectory", None) if "trajectory" in pred else None
    outputs = _output_fields(pred)
    if isinstance(react, dict):
        steps.extend(_react_steps(react, is_error))
        agent = "dspy.ReAct"
    else:
        steps.extend(_trace_steps(trace, outputs))
        agent = "dspy.Module"
    reasoning = pred.get("reasoning") if "reasoning" in pred else None
    if reasoning and str(reasoning).strip():
        steps.append(Step("assistant", str(reasoning).strip()))
    steps.append(Step("final_answer", _fields_text(outputs) if outputs else ""))

    digest = hashlib.sha256(json.dumps([[s.kind, s.content, s.tool_name, _text(s.arguments), s.is_error]
                                        for s in steps], ensure_ascii=False).encode("utf-8")).hexdigest()
    task_id = example.get("task_id") if hasattr(example, "get") else None
    return Trajectory(
        id=f"proxy:{digest[:16]}", task_id=str(task_id) if task_id is not None else f"proxy:{digest[:16]}",
        domain=domain, agent=agent, steps=tuple(steps), reward=None, label=None,
        source=Source(SOURCE_FILE, 0),
    )
