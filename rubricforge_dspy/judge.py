"""The judge: a DSPy Signature whose instruction is the rubric, and the Module that applies it.

One call per trajectory. Any failure to get a well-formed verdict (LM or network error, unparsable
output, a non-finite score) becomes a *fail* verdict marked `abstained`, with the error kept: a broken
judge must never pass an agent, and must never stop a batch.
"""

from __future__ import annotations

import json
import math

import dspy

from rubricforge_dspy.render import RenderConfig, render_trajectory
from rubricforge_dspy.rubric import SEED_RUBRIC, rubric_sha256
from rubricforge_dspy.trajectory import Trajectory

REASON_MAX_CHARS = 300


class JudgeTrajectory(dspy.Signature):
    __doc__ = SEED_RUBRIC

    trajectory: str = dspy.InputField(desc="The agent episode: observable events only, numbered in order.")
    reason: str = dspy.OutputField(
        desc="One sentence naming the decisive observable evidence.", max_length=REASON_MAX_CHARS
    )
    passed: bool = dspy.OutputField(desc="True if the agent accomplished the user's task.")
    score: float = dspy.OutputField(desc="Probability in [0, 1] that the task was accomplished.")


def judge_signature(rubric: str = SEED_RUBRIC) -> type[dspy.Signature]:
    """`JudgeTrajectory` with `rubric` as its instruction."""
    return JudgeTrajectory.with_instructions(rubric)


def abstention(error: BaseException | str) -> dspy.Prediction:
    """The fail verdict recorded when no well-formed verdict could be obtained."""
    message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return dspy.Prediction(passed=False, score=0.0, reason="", abstained=True, error=message)


def _coerce_verdict(prediction) -> dspy.Prediction:
    passed = prediction.passed
    if isinstance(passed, str):
        lowered = passed.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"passed is not a boolean: {passed!r}")
        passed = lowered == "true"
    if not isinstance(passed, bool):
        raise ValueError(f"passed is not a boolean: {passed!r}")
    score = float(prediction.score)
    if not math.isfinite(score):
        raise ValueError(f"score is not finite: {score!r}")
    reason = " ".join(str(prediction.reason or "").split())[:REASON_MAX_CHARS]
    return dspy.Prediction(
        passed=passed, score=min(1.0, max(0.0, score)), reason=reason, abstained=False, error=None
    )


class TrajectoryJudge(dspy.Module):
    """Judge agent trajectories against a rubric.

    `judge(trajectory=...)` accepts rendered text or a `Trajectory` (rendered with `render_config`)
    and returns a `dspy.Prediction` with `passed`, `score`, `reason`, `abstained` and `error`.
    """

    def __init__(self, rubric: str = SEED_RUBRIC, render_config: RenderConfig | None = None,
                 adapter: dspy.Adapter | None = None):
        super().__init__()
        self.judge = dspy.Predict(judge_signature(rubric))
        self.render_config = render_config or RenderConfig()
        self.adapter = adapter or dspy.JSONAdapter()
        self.manifest: dict | None = None

    @property
    def rubric(self) -> str:
        return self.judge.signature.instructions

    @property
    def program_sha256(self) -> str:
        """Identity of what the LM is sent besides the trajectory: the rubric's sha256, extended with
        the demonstrations when there are any (a few-shot judge is a different program)."""
        if not self.judge.demos:
            return rubric_sha256(self.rubric)
        demos = json.dumps([dict(d) for d in self.judge.demos], sort_keys=True, default=str)
        return rubric_sha256(self.rubric + "\n#demos " + demos)

    def render(self, trajectory: Trajectory | str) -> str:
        if isinstance(trajectory, Trajectory):
            return render_trajectory(trajectory, self.render_config)
        return trajectory

    def forward(self, trajectory: Trajectory | str) -> dspy.Prediction:
        text = self.render(trajectory)
        try:
            with dspy.context(adapter=self.adapter):
                raw = self.judge(trajectory=text)
            return _coerce_verdict(raw)
        except Exception as error:  # noqa: BLE001 - any failure is a recorded fail, by contract
            return abstention(error)

    def as_metric(self, **options):
        """This judge as a DSPy metric (GEPA, MIPROv2, BootstrapFewShot); see `rubricforge_dspy.proxy.as_metric`."""
        from rubricforge_dspy.proxy import as_metric

        return as_metric(self, **options)

    def save(self, path, save_program: bool = False, modules_to_serialize=None):
        from rubricforge_dspy.program import save_judge

        if save_program:
            raise ValueError("TrajectoryJudge saves as JSON only; pickled programs are not supported")
        save_judge(self, path)

    def load(self, path, allow_pickle: bool = False, allow_unsafe_lm_state: bool = False):
        from rubricforge_dspy.program import load_judge_state

        if allow_pickle or str(path).endswith(".pkl"):
            raise ValueError(f"{path}: TrajectoryJudge loads JSON programs only, never pickles")
        load_judge_state(self, path)
        return self
