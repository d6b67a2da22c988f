"""A frozen RubricForge judge as an Inspect AI scorer.

``pip install "rubricforge-dspy[inspect]"``. Importing this module imports ``inspect_ai``.

`rubricforge_scorer` renders the `TaskState`'s messages (tool calls, tool results and their errors) as
the judge's evidence through the Inspect log loader's message mapping (`data.formats.inspect_ai`), so a
sample judged live reads exactly as the same sample read from its ``.eval`` log. The target, the
sample's metadata and any earlier score are never read. The `Score`: value ``CORRECT``/``INCORRECT``
from ``passed``, explanation = the reason, metadata = score, criterion, abstained (and the error kind,
rubric and program hashes). An abstention (no verdict produced: LM error, unparsable or truncated
answer) is `Score.unscored` with reason ``grader_failed``: recorded, never counted as a verdict.

    from inspect_ai import Task
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.integrations.inspect import rubricforge_scorer

    Task(dataset=..., solver=..., scorer=rubricforge_scorer(
        "programs/judge.json", lm=LMConfig(model="openai/qwen3-8b", api_base="http://127.0.0.1:8000/v1")))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.data.formats.inspect_ai import to_trajectory
from rubricforge_dspy.integrations._judging import ProgramFacts, criterion_name, judge_with_facts
from rubricforge_dspy.judge.execution import judge_verdict
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.engine import make_lm

try:
    import anyio
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer, stderr
    from inspect_ai.solver import TaskState
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError('rubricforge_dspy.integrations.inspect needs inspect_ai: pip install "rubricforge-dspy[inspect]"'
                      ) from _missing

__all__ = ["rubricforge_scorer", "state_to_trajectory", "verdict_score"]


def state_to_trajectory(state: TaskState, task: str = "inspect") -> Trajectory:
    """The `Trajectory` of a `TaskState`: its messages only (through the Inspect log loader's mapping).

    The sample's target, metadata, store and scores are not passed to the mapping, so they cannot
    reach the judge.
    """
    messages = [m.model_dump(mode="json", exclude_none=True) for m in state.messages]
    sample = {"id": state.sample_id, "epoch": state.epoch, "messages": messages}
    header = {"eval": {"task": task, "model": str(state.model)}}
    return to_trajectory(sample, header, Path(task), 0, None)


def verdict_score(verdict: Verdict, facts: ProgramFacts) -> Score:
    """The Inspect `Score` of one verdict (an abstention: `Score.unscored`, reason ``grader_failed``)."""
    metadata = {"score": verdict.score, "score_calibrated": verdict.score_calibrated,
                "pass_threshold": facts.pass_rule.threshold, "pass_threshold_on": facts.pass_rule.on,
                "criterion": criterion_name(verdict, facts.rubric),
                "abstained": verdict.abstained, "error_kind": verdict.error_kind,
                "rubric_sha256": facts.rubric_sha256, "program_sha256": facts.program_sha256}
    if verdict.abstained:
        return Score.unscored(reason="grader_failed", explanation=verdict.error, metadata=metadata)
    return Score(value=CORRECT if verdict.passed else INCORRECT, explanation=verdict.reason, metadata=metadata)


# inspect_ai is read as untyped (pyproject.toml: the same with and without the [inspect] extra)
@scorer(metrics=[accuracy(), stderr()], name="rubricforge")  # type: ignore[untyped-decorator]
def rubricforge_scorer(program: str | Path | Any, lm: Any = None, allow_unverified: bool = False) -> Scorer:
    """A frozen RubricForge judge as an Inspect scorer.

    Args:
        program: the frozen program file (or a judge loaded with `rubricforge_dspy.load`).
        lm: the judge's LM: a `dspy.LM`, or an `LMConfig` (built with `make_lm`); None keeps the judge's
            own (``dspy.configure``).
        allow_unverified: accept a program whose manifest cannot verify it.

    Returns:
        An Inspect `Scorer`; its scores' value is ``C``/``I`` (so `accuracy` is the judge's pass rate),
        abstentions are unscored (reason ``grader_failed``).

    Raises:
        InputError: a missing or unverifiable program (when the scorer is built, before any sample).
    """
    judge, facts = judge_with_facts(program, make_lm(lm) if isinstance(lm, LMConfig) else lm,
                                    allow_unverified=allow_unverified)

    async def score(state: TaskState, target: Target) -> Score:  # the target is never read
        trajectory = state_to_trajectory(state)
        verdict = await anyio.to_thread.run_sync(judge_verdict, judge, trajectory)
        return verdict_score(verdict, facts)

    return score
