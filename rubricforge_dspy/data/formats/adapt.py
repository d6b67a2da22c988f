"""ADaPT (Prasad et al. 2023) WebShop result dumps: ``{fixed_i: {problem, score, success, action_history}}``.

The ``overall`` key is file-level metadata (mean score, success rate), not a record: it is skipped
and copied to each trajectory's ``hidden["file_overall"]``. The dumps hold the agent's ACTIONS ONLY
(no observations): ``problem`` -> the ``user`` step, ``think[...]`` -> ``assistant``, every other
``verb[...]`` -> ``tool_call`` (no ``tool_result`` exists). Reward = the graded ``score``;
``success`` goes to ``hidden``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import (
    FULL_REWARD,
    LabelRule,
    Source,
    Step,
    Trajectory,
    label_from_reward,
)
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import Malformed, has_bad_bytes, iter_json_object, read_text
from rubricforge_dspy.data.formats._steps import as_reward, error
from rubricforge_dspy.data.formats.webshop import parse_action

NAME = "adapt"
# ADaPT's own ``success`` is ``score == 1`` (44 of 100 in the shipped dump; its ``overall.success_rate``).
LABEL_RULE = FULL_REWARD
DOMAIN = "webshop"
METADATA_KEYS = ("overall",)


def sniff(prefix: str) -> bool:
    """True when a file prefix looks like an ADaPT results dict."""
    head = prefix.lstrip()
    return head.startswith("{") and '"action_history"' in head and '"problem"' in head


def agent_name(path: Path) -> str:
    """``ADaPT_maxd3_webshop_gpt-3.5-turbo`` -> ``ADaPT-maxd3/gpt-3.5-turbo``."""
    parts = path.stem.split("_")
    if len(parts) >= 4 and parts[2] == "webshop":
        return f"{parts[0]}-{parts[1]}/{'_'.join(parts[3:])}"
    return path.stem


def steps_of(record: dict[str, Any]) -> list[Step]:
    steps = [Step(kind="user", content=str(record.get("problem") or "").strip())]
    for i, action in enumerate(record["action_history"]):
        verb, arg = parse_action(action)
        if verb == "think":
            steps.append(Step(kind="assistant", content=arg))
        else:
            steps.append(Step(kind="tool_call", tool_name=verb, arguments=arg, call_id=f"call_{i}"))
    return steps


def convert(key: str, record: Any, *, path: Path, index: int, overall: Any, threshold: LabelRule | float) -> Trajectory:
    """One ``fixed_i`` record as a `Trajectory`; ValueError with the problem when it cannot be."""
    if not isinstance(record, dict):
        raise ValueError(f"record {key!r} must be a JSON object, got {type(record).__name__}")
    if "score" not in record:
        raise ValueError(f"record {key!r}: missing 'score' (the reward)")
    reward = as_reward(record["score"], "score")
    actions = record.get("action_history")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ValueError(f"record {key!r}: 'action_history' must be a list of strings")
    if not actions:
        raise ValueError(f"record {key!r}: empty trajectory (no actions)")
    return Trajectory(
        id=f"{path.stem}:{key}",
        task_id=key,
        domain=DOMAIN,
        agent=agent_name(path),
        steps=tuple(steps_of(record)),
        reward=reward,
        label=label_from_reward(reward, threshold),
        source=Source(str(path), index),
        hidden={
            "format": NAME,
            "success": record.get("success"),
            "score": record.get("score"),
            "file_overall": overall,
            "observations_available": False,
        },
    )


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(record_index, Trajectory | TrajectoryFormatError)`` for every non-metadata key."""
    text, had_bad_bytes = read_text(path)
    members: list[tuple[str, Any]] = []
    failure: Malformed | None = None
    try:
        for _, key, value, _ in iter_json_object(text):
            members.append((key, value))
    except Malformed as exc:
        failure = exc
    del text
    overall = dict(members).get("overall")
    records = [(k, v) for k, v in members if k not in METADATA_KEYS]
    for index, (key, record) in enumerate(records):
        if had_bad_bytes and (has_bad_bytes(record) or has_bad_bytes(key)):
            yield index, error(path, index, f"record {key!r}: invalid UTF-8 bytes")
            continue
        try:
            yield index, convert(key, record, path=path, index=index, overall=overall, threshold=threshold)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            yield index, error(path, index, str(exc))
    if failure is not None:
        where = len(records) if failure.index is not None else None
        yield where, error(path, where, f"{failure.problem}; the rest of the file is unreadable")


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=140, description="an ADaPT WebShop dump",
    sniff=lambda sample: sample.is_object and sniff(sample.head))
