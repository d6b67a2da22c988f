"""The judge as the reward of an RL trainer: TRL's GRPO ``reward_funcs`` and verl's ``compute_score``.

    reward = as_reward_function(judge, lm=judge_lm, max_concurrency=16)       # TRL
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=...)
    compute_score = as_verl_compute_score(judge, lm=judge_lm, abstain_value=0.0)   # verl

Both are called exactly as the trainers call them (read from their source):

- TRL (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._calculate_rewards``):
  ``f(prompts=, completions=, completion_ids=, **reward_kwargs) -> list[float | None]``, where
  ``reward_kwargs`` holds every other dataset column (a list per column; labels such as ``solution`` or
  ``ground_truth`` among them), ``trainer_state``, ``log_extra``, ``log_metric`` and possibly
  ``environments``. Prompts and completions are strings (standard format) or lists of
  ``{"role", "content"}`` messages (conversational); with tools, a completion holds the assistant's
  ``tool_calls`` (``{"type": "function", "function": {"name", "arguments"}}``, no id) and the ``tool``
  messages TRL appended (``{"role": "tool", "name", "content"}``; a failed tool's content is
  ``str({"error": ...})``). TRL turns a ``None`` reward into NaN and leaves a completion that no reward
  function scored out of the group baseline (advantage 0): that is what an abstention gets by default.
- verl (``verl/workers/reward_manager/naive.py``, ``.../batch.py``, ``verl/utils/reward_score``):
  ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=) -> float | dict`` per item, or
  with ``batched=True`` (the ``batch`` reward manager) ``compute_score(data_sources=, solution_strs=,
  ground_truths=, extra_infos=, **reward_kwargs) -> list``. verl puts the result into a tensor, so an
  abstention must be a number: `abstain_value` is required.

What the judge sees: the prompt's and the completion's messages, converted by the generic JSONL
loader's message reader (`data.formats.jsonl.steps_of`), or for verl the response alone (and, only
when `prompt_key` names it, that one ``extra_info`` field as the user turn). Dataset columns,
``ground_truth``, ``extra_info`` and every other keyword are never rendered.

Every completion gets exactly one reward. A completion the judge could not grade (an LM error, an
answer that is not a verdict) or that is not a valid message list gets `abstain_value`, is counted
(`RewardCounters`), and a `RewardAbstentionWarning` says how many; too many abstentions in a row
(`max_consecutive_abstentions`, the judge server is down) raise `RewardJudgeError` instead of feeding
the trainer a run of non-rewards.
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import dspy

from rubricforge_dspy.core.errors import InputError, RubricForgeWarning, ServerError
from rubricforge_dspy.core.trajectory import Source, Step, Trajectory
from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.data.formats._steps import parse_arguments
from rubricforge_dspy.data.formats.jsonl import steps_of
from rubricforge_dspy.judge.batching import judge_batch
from rubricforge_dspy.judge.execution import RetryPolicy
from rubricforge_dspy.lm.circuit import JudgeUnavailableError, LMCircuit
from rubricforge_dspy.lm.config import lm_name
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm

__all__ = ["as_reward_function", "as_verl_compute_score", "JudgeReward", "VerlComputeScore", "RewardCounters",
           "RewardAbstentionWarning", "RewardJudgeError", "trajectory_from_messages", "trajectory_to_messages",
           "SOURCE_FILE"]

SOURCE_FILE = "<rl rollout>"
Mode = Literal["graded", "binary"]


class RewardAbstentionWarning(RubricForgeWarning):
    """Some completions were not judged; they got the documented `abstain_value`."""


class RewardJudgeError(ServerError):
    """The judge abstained on too many completions in a row: its server is down or it cannot answer."""


@dataclass
class RewardCounters:
    """What a reward callable did so far: ``items`` rewarded, ``judged`` (a produced verdict),
    ``passed``, ``abstained`` (no verdict: `abstain_value` given), ``malformed`` (of the abstentions: the
    input was not a message list the loader can read), ``by_kind`` (abstentions by error kind, and
    ``"malformed"``), ``calls`` (trainer calls)."""

    calls: int = 0
    items: int = 0
    judged: int = 0
    passed: int = 0
    abstained: int = 0
    malformed: int = 0
    by_kind: Counter[str | None] = field(default_factory=Counter)


def _normalize(messages: Any, where: str) -> list[dict[str, Any]]:
    """TRL's messages in the shape of the generic JSONL format (`data.formats.jsonl`): tool calls
    without an id get none (the loader numbers them), and a tool message whose content is TRL's
    ``str({"error": ...})`` is marked ``is_error``."""
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"{where}: expected a list of {{'role', 'content'}} messages, got {type(messages).__name__}")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"{where}: message {i} is not a {{'role', 'content'}} dict")
        message = dict(message)
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function") or {"name": call.get("name"), "arguments": call.get("arguments")}
                calls.append({"id": call.get("id"), "type": "function",
                              "function": {"name": str(function.get("name") or "unknown"),
                                           "arguments": function.get("arguments")}})
            message["tool_calls"] = calls
        if message["role"] == "tool" and "is_error" not in message and isinstance(message.get("content"), str):
            value = parse_arguments(message["content"])
            if isinstance(value, dict) and set(value) == {"error"}:
                message["is_error"] = True
        out.append(message)
    return out


def trajectory_from_messages(prompt: str | Sequence[Mapping[str, Any]],
                             completion: str | Sequence[Mapping[str, Any]], *, index: int = 0) -> Trajectory:
    """One rollout as an unlabeled `Trajectory`: a string prompt is the user turn and a string completion
    the final answer (TRL's standard format); message lists (conversational format, with tool calls and
    tool results) are read by the generic JSONL loader's message reader (`data.formats.jsonl.steps_of`).
    System messages are not steps. The rollout is unlabeled (``label=None``).

    Raises:
        ValueError: the messages cannot be read (a tool result answering no call, a message without a role).
    """
    if isinstance(prompt, str) and isinstance(completion, str):
        steps = [Step("user", prompt), Step("final_answer", completion)]
    else:
        prompt_messages = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                           else _normalize(prompt, "prompt"))
        completion_messages = ([{"role": "assistant", "content": completion}] if isinstance(completion, str)
                               else _normalize(completion, "completion"))
        steps = steps_of([*prompt_messages, *completion_messages])
    if not steps:
        raise ValueError("no user, assistant or tool message to judge")
    digest = hashlib.sha256(json.dumps([[s.kind, s.content, s.tool_name, str(s.arguments), s.is_error] for s in steps],
                                       ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    return Trajectory(id=f"rollout:{index}:{digest}", task_id=f"rollout:{digest}", domain="rl", agent="policy",
                      steps=tuple(steps), reward=None, label=None, source=Source(SOURCE_FILE, index))


def trajectory_to_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """A `Trajectory` as the chat messages TRL (conversational format) and verl (a chat-template ``prompt``)
    expect: ``{"role", "content"}`` dicts, tool calls as the assistant's OpenAI ``tool_calls`` (consecutive
    calls in one assistant message, after its text when it has any) and tool results as ``{"role": "tool",
    "tool_call_id", "name", "content"}``; a failed tool's content is TRL's ``str({"error": ...})``. The inverse
    of `trajectory_from_messages` up to ids.

    Only the observable steps are read: never ``label``, ``reward`` nor ``hidden`` (gold actions, the user
    simulator's instruction, evaluator output), so the messages can be a training prompt without leaking the
    outcome.

    Args:
        trajectory: the trajectory to convert.

    Returns:
        The messages, in step order.
    """
    messages: list[dict[str, Any]] = []
    open_calls: list[str] = []  # ids of calls still unanswered, oldest first
    for number, step in enumerate(trajectory.steps):
        if step.kind == "tool_call":
            call_id = step.call_id or f"call_{number}"
            arguments = step.arguments if isinstance(step.arguments, str) else json.dumps(
                step.arguments if step.arguments is not None else {}, ensure_ascii=False)
            call = {"id": call_id, "type": "function", "function": {"name": str(step.tool_name or "unknown"),
                                                                     "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and (last.get("tool_calls") or not open_calls):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            open_calls.append(call_id)
        elif step.kind == "tool_result":
            answered: str | None = step.call_id if step.call_id in open_calls else (open_calls[0] if open_calls
                                                                                       else None)
            if answered is not None:
                open_calls.remove(answered)
            content = str({"error": step.content}) if step.is_error else step.content
            message = {"role": "tool", "content": content, "name": str(step.tool_name or "unknown")}
            if answered is not None:
                message["tool_call_id"] = answered
            messages.append(message)
        else:
            role = "user" if step.kind == "user" else "assistant"
            messages.append({"role": role, "content": step.content})
    return messages


def _calls_an_lm(judge: Any) -> bool:
    """Whether `judge` has a predictor (an LM call): a `FloorJudge`, or a cascade whose stages are all floors,
    has none."""
    return bool(judge.predictors()) if hasattr(judge, "predictors") else True


class _Rewarder:
    """Judges rollouts concurrently (the in-memory batch engine, `judge.batching.judge_batch`: at most
    ``max_concurrency`` calls at once) and keeps the counters; the shared part of the TRL and verl callables."""

    def __init__(self, judge: dspy.Module, *, abstain_value: float | None, mode: Mode, max_concurrency: int,
                 lm: dspy.BaseLM | None, retry: RetryPolicy, max_consecutive_abstentions: int | None, name: str):
        if mode not in ("graded", "binary"):
            raise InputError(f"mode must be 'graded' or 'binary', got {mode!r}")
        if max_concurrency < 1:
            raise InputError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_consecutive_abstentions is not None and max_consecutive_abstentions < 1:
            raise InputError("max_consecutive_abstentions must be >= 1 (or None for no limit)")
        if abstain_value is not None and (isinstance(abstain_value, bool)
                                          or not isinstance(abstain_value, (int, float))):
            raise InputError(f"abstain_value must be a number or None, got {abstain_value!r}")
        self.judge = judge
        self.abstain_value = None if abstain_value is None else float(abstain_value)
        self.mode = mode
        self.max_concurrency = max_concurrency
        self.lm = lm
        self.retry = retry
        self.max_consecutive_abstentions = max_consecutive_abstentions
        self.__name__ = name  # TRL names a reward function by ``__name__`` in its logs
        self.counters = RewardCounters()
        self._lock = threading.Lock()
        self._consecutive = 0
        self._lm_copy: tuple[dspy.BaseLM, dspy.BaseLM] | None = None

    def _judge_lm(self) -> dspy.BaseLM | None:
        """The one-attempt copy of the judge's LM; None for a judge that makes no LM call (a floor, a cascade
        of floors): it needs no LM, and none is resolved or set."""
        if not _calls_an_lm(self.judge):
            return None
        lm = resolve_lm(self.judge, self.lm)
        if lm is None:
            raise InputError("no judge LM: pass lm= to the reward function, set the judge's (judge.set_lm(lm)) "
                             "or configure one (dspy.configure(lm=lm))")
        with self._lock:
            if self._lm_copy is None or self._lm_copy[0] is not lm:
                self._lm_copy = (lm, one_attempt_lm(lm, connections=self.max_concurrency))
            return self._lm_copy[1]

    def score_of(self, verdict: Verdict) -> float:
        if self.mode == "binary":
            return 1.0 if verdict.passed else 0.0
        return verdict.score_calibrated if verdict.score_calibrated is not None else verdict.score

    def rewards(self, items: Sequence[tuple[Any, Any]]) -> list[tuple[float | None, Verdict | None]]:
        """``(reward, verdict)`` per ``(prompt, completion)``, in order (verdict None: malformed input)."""
        lm = self._judge_lm()
        trajectories: list[Trajectory | None] = []
        for index, (prompt, completion) in enumerate(items):
            try:
                trajectories.append(trajectory_from_messages(prompt, completion, index=index))
            except ValueError:
                trajectories.append(None)  # malformed: no call, counted as such by `_count`
        readable = [(i, t) for i, t in enumerate(trajectories) if t is not None]
        verdicts: list[Verdict | None] = [None] * len(items)
        finished: dict[int, Verdict] = {}
        limit = self.max_consecutive_abstentions
        circuit = None if limit is None or lm is None else LMCircuit(
            limit, lm_name(lm), counted=" after retries", advice="Stopped rather than handing the trainer non-rewards.")
        try:
            with dspy.context(**({"lm": lm} if lm is not None else {})):  # (the engine carries it to every call)
                judged = judge_batch(self.judge, [t for _, t in readable],
                                     window=max(1, min(self.max_concurrency, len(readable))), policy=self.retry,
                                     circuit=circuit, on_verdict=lambda k, verdict: finished.__setitem__(k, verdict))
        except JudgeUnavailableError as error:  # the judge server is down: count what was recorded, then stop
            made: list[Verdict | None] = [finished[k] for k in sorted(finished)]
            self._count(made, raise_after=False)
            raise RewardJudgeError(f"the judge abstained on the last {limit} completions in a row ({error}): is "
                                   "the judge LM server up? Stopping rather than handing the trainer non-rewards"
                                   ) from error
        for (index, _), verdict in zip(readable, judged, strict=True):
            verdicts[index] = verdict
        return self._count(verdicts)

    def _count(self, verdicts: list[Verdict | None],
               raise_after: bool = True) -> list[tuple[float | None, Verdict | None]]:
        out = []
        kinds: Counter[str | None] = Counter()
        with self._lock:
            counters = self.counters
            counters.calls += 1
            for verdict in verdicts:
                counters.items += 1
                if verdict is None or verdict.abstained:
                    kind = "malformed" if verdict is None else verdict.error_kind
                    kinds[kind] += 1
                    counters.abstained += 1
                    counters.malformed += verdict is None
                    counters.by_kind[kind] += 1
                    self._consecutive += 1
                    out.append((self.abstain_value, verdict))
                else:
                    counters.judged += 1
                    counters.passed += verdict.passed
                    self._consecutive = 0
                    out.append((self.score_of(verdict), verdict))
            consecutive = self._consecutive
        if kinds:
            warnings.warn(f"{sum(kinds.values())} of {len(verdicts)} completion(s) were not judged "
                          f"({', '.join(f'{k}: {n}' for k, n in sorted(kinds.items()))}); they got the reward "
                          f"{self.abstain_value!r} (abstain_value). Totals: {self.counters.abstained} of "
                          f"{self.counters.items}", RewardAbstentionWarning, stacklevel=3)
        limit = self.max_consecutive_abstentions
        if raise_after and limit is not None and consecutive >= limit:
            raise RewardJudgeError(f"the judge abstained on the last {consecutive} completions in a row "
                                   f"({dict(kinds)}): is the judge LM server up? Stopping rather than handing the "
                                   "trainer non-rewards")
        return out


class JudgeReward(_Rewarder):
    """A TRL GRPO reward function backed by a judge; build it with `as_reward_function`.

    ``reward(prompts=, completions=, completion_ids=None, **kwargs) -> list[float | None]``; the keyword
    arguments (dataset columns, ``trainer_state``, ``log_extra``, ``log_metric``, ``environments``) are
    accepted and never shown to the judge. Counters: ``counters`` (`RewardCounters`).
    """

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kwargs: Any) -> list[float | None]:
        if len(prompts) != len(completions):
            raise InputError(f"reward function got {len(prompts)} prompts and {len(completions)} completions")
        results = self.rewards(list(zip(prompts, completions, strict=True)))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):  # TRL's hook for scalar metrics of a reward function
            log_metric(f"{self.__name__}/abstained", float(sum(v is None or v.abstained for _, v in results)))
        return [reward for reward, _ in results]


_Score = float | None | dict[str, Any]  # one verl score: the reward, or with return_dict the reward and flags


class VerlComputeScore(_Rewarder):
    """verl's ``compute_score`` backed by a judge; build it with `as_verl_compute_score`."""

    def __init__(self, judge: dspy.Module, *, prompt_key: str | None, return_dict: bool, batched: bool,
                 **options: Any):
        super().__init__(judge, **options)
        self.prompt_key = prompt_key
        self.return_dict = return_dict
        self.batched = batched

    def _prompt(self, extra_info: Any) -> str | None:
        if self.prompt_key is None:
            return None
        if not isinstance(extra_info, dict) or not isinstance(extra_info.get(self.prompt_key), str):
            raise InputError(f"prompt_key={self.prompt_key!r}: extra_info has no text field {self.prompt_key!r} "
                             f"(its keys: {sorted(extra_info) if isinstance(extra_info, dict) else extra_info!r})")
        prompt: str = extra_info[self.prompt_key]
        return prompt

    def _item(self, solution_str: str, extra_info: Any) -> tuple[Any, Any]:
        """``(prompt, completion)``: the response alone, or after the `prompt_key` text as the user turn."""
        prompt = self._prompt(extra_info)
        if prompt is None:
            return [], [{"role": "assistant", "content": solution_str}]
        return prompt, solution_str

    def _result(self, reward: float | None, verdict: Verdict | None) -> _Score:
        if not self.return_dict:
            return reward
        return {"score": reward, "judge_passed": bool(verdict is not None and verdict.passed),
                "judge_abstained": verdict is None or verdict.abstained}

    def __call__(self, *args: Any, **kwargs: Any) -> _Score | list[_Score]:
        if self.batched:
            return self._batch(*args, **kwargs)
        return self._single(*args, **kwargs)

    def _single(self, data_source: Any, solution_str: str, ground_truth: Any = None, extra_info: Any = None,
                **kwargs: Any) -> _Score:
        prompt, completion = self._item(solution_str, extra_info)
        items = [(completion, [])] if prompt == [] else [(prompt, completion)]
        [(reward, verdict)] = self.rewards(items)
        return self._result(reward, verdict)

    def _batch(self, data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Any = None,
               extra_infos: Sequence[Any] | None = None, **kwargs: Any) -> list[_Score]:
        extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
        if len(extra_infos) != len(solution_strs):
            raise InputError(f"compute_score got {len(solution_strs)} solution_strs and {len(extra_infos)} extra_infos")
        items = [self._item(solution, extra) for solution, extra in zip(solution_strs, extra_infos, strict=True)]
        return [self._result(reward, verdict) for reward, verdict in self.rewards(items)]


def as_reward_function(judge: dspy.Module, *, abstain_value: float | None = None, mode: Mode = "graded",
                       max_concurrency: int = 8, lm: dspy.BaseLM | None = None, retry: RetryPolicy = RetryPolicy(),
                       max_consecutive_abstentions: int | None = 64, name: str = "rubricforge_judge") -> JudgeReward:
    """`judge` as a TRL GRPO reward function (``GRPOTrainer(reward_funcs=[...])``).

    Args:
        judge: a `TrajectoryJudge` (or any judge `judge_verdict` can call), e.g. from `load`.
        abstain_value: the reward of a completion the judge could not grade: None (default) is TRL's "no
            reward" (NaN: left out of the group baseline, advantage 0); a number is used as is.
        mode: ``"graded"``: the verdict's calibrated score (its raw score when uncalibrated); ``"binary"``:
            1.0 when it passed, else 0.0.
        max_concurrency: judge requests in flight per trainer call (threads).
        lm: the judge's LM (default: the judge's own, else ``dspy.settings.lm``); one attempt per call,
            transient errors retried by `retry`. A judge that makes no LM call (a `FloorJudge`, a cascade of
            floors) needs none: no LM is resolved.
        retry: the retry policy of transient LM errors (`judge.execution.RetryPolicy`).
        max_consecutive_abstentions: raise `RewardJudgeError` after this many abstentions in a row (None:
            never); within one trainer call, the batch stops as soon as this many calls in a row failed with an
            LM error (the engine's dead-server circuit), instead of calling the judge for every completion first.
        name: the function's ``__name__`` (TRL's log key).

    Returns:
        A `JudgeReward`: ``reward(prompts=, completions=, completion_ids=None, **kwargs) -> list[float | None]``
        with ``counters``.
    """
    return JudgeReward(judge, abstain_value=abstain_value, mode=mode, max_concurrency=max_concurrency, lm=lm,
                       retry=retry, max_consecutive_abstentions=max_consecutive_abstentions, name=name)


def as_verl_compute_score(judge: dspy.Module, *, abstain_value: float, mode: Mode = "graded", batched: bool = False,
                          prompt_key: str | None = None, return_dict: bool = False, max_concurrency: int = 8,
                          lm: dspy.BaseLM | None = None, retry: RetryPolicy = RetryPolicy(),
                          max_consecutive_abstentions: int | None = 64,
                          name: str = "rubricforge_judge") -> VerlComputeScore:
    """`judge` as verl's ``custom_reward_function`` (``compute_score``).

    Args:
        judge: a `TrajectoryJudge` (or any judge `judge_verdict` can call).
        abstain_value: the score of a response the judge could not grade (required: verl stores scores in
            a tensor, so there is no "no reward"); counted in ``counters``.
        mode: ``"graded"`` (calibrated score) or ``"binary"`` (1.0 / 0.0 by ``passed``).
        batched: the ``batch`` reward manager's signature (``data_sources, solution_strs, ground_truths,
            extra_infos, **kwargs -> list``), judged concurrently; else one item per call (the ``naive``
            manager's, and the reward loop's, which runs items concurrently itself).
        prompt_key: an ``extra_info`` field holding the task text, shown as the user turn (None: the judge
            reads the response alone). Only that field is read; ``ground_truth`` never is.
        return_dict: return ``{"score", "judge_passed", "judge_abstained"}`` (verl logs the extra keys).
        max_concurrency: judge requests in flight per batched call.
        lm: the judge's LM (default: the judge's own, else ``dspy.settings.lm``; none for a judge that makes
            no LM call).
        retry: the retry policy of transient LM errors.
        max_consecutive_abstentions: raise `RewardJudgeError` after this many abstentions in a row (within a
            batched call, as soon as this many calls in a row failed with an LM error).
        name: the function's ``__name__``.

    Returns:
        A `VerlComputeScore` with ``counters``.
    """
    return VerlComputeScore(judge, prompt_key=prompt_key, return_dict=return_dict, batched=batched,
                            abstain_value=abstain_value, mode=mode, max_concurrency=max_concurrency, lm=lm,
                            retry=retry, max_consecutive_abstentions=max_consecutive_abstentions, name=name)
