"""Rewards: a judge as the reward of RL trainers (TRL's GRPO ``reward_funcs``, verl's ``compute_score``).

In: a judge (`TrajectoryJudge`, e.g. from `load`) and its LM. Out: callables with the trainers' own
signatures, judging rollouts concurrently, counting and warning about the completions they could not
judge (`RewardCounters`). The DSPy-optimizer reward is `judge.metric.as_metric`.

Modules:

- :mod:`.trainers`: `as_reward_function` (TRL), `as_verl_compute_score` (verl), the rollout reader.

Names are imported lazily.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.rewards.trainers": ["as_reward_function", "as_verl_compute_score", "JudgeReward",
                                          "VerlComputeScore", "RewardCounters", "RewardAbstentionWarning",
                                          "RewardJudgeError", "trajectory_from_messages",
                                          "trajectory_to_messages"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
