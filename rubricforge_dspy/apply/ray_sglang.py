"""The in-Ray SGLang engine of `apply.ray.judge_dataset`: SGLang engines inside Ray (`ray.data.llm`), on GPU
nodes, with the judge's own prompt (`JudgePrompt`) and strict parse (`JudgeAnswer`); see `apply.ray`.

This module imports without the ``[ray]`` extra (`sglang_processor` raises `MissingExtraError` without it).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import dspy
import orjson

from rubricforge_dspy.apply.ray_data import job_line, ray_module, row_trajectory
from rubricforge_dspy.core.errors import InputError, MissingExtraError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import Verdict, verdict_line
from rubricforge_dspy.judge.execution import as_verdict
from rubricforge_dspy.judge.loading import judge_from
from rubricforge_dspy.judge.module import TrajectoryJudge, VerdictFormatError
from rubricforge_dspy.lm.config import LMConfig, bound_strings
from rubricforge_dspy.lm.engine import make_lm
from rubricforge_dspy.lm.errors import error_kind

if TYPE_CHECKING:
    from ray.data.llm import SGLangEngineProcessorConfig

__all__ = ["sglang_processor", "JudgePrompt", "JudgeAnswer", "SGLANG_ENDPOINT"]

SGLANG_ENDPOINT = "ray.data.llm:sglang-engine"  # stands for the endpoint in the fingerprint of the in-Ray engine


def _plain_judge(judge: object) -> TrajectoryJudge:
    if not isinstance(judge, TrajectoryJudge) or type(judge) is not TrajectoryJudge:
        raise InputError(f"the in-Ray SGLang engine runs a plain judge (TrajectoryJudge); a "
                         f"{type(judge).__name__} reads more than the text: judge it with engine 'http'")
    return judge


def _json_schema(judge: TrajectoryJudge, max_string_length: int | None) -> str | None:
    """The JSON schema of the judge's answer, as the HTTP path sends it in ``response_format``."""
    kwargs: dict[str, Any] = {}
    lm = SimpleNamespace(supported_params=frozenset({"response_format"}), supports_response_schema=True)
    judge.adapter.plan_response_format(lm, kwargs, judge.judge.signature)
    planned = kwargs.get("response_format")
    if planned is None:
        return None
    schema = planned.model_json_schema() if hasattr(planned, "model_json_schema") else dict(planned)
    return json.dumps(bound_strings(schema, max_string_length) if max_string_length else schema)


class JudgePrompt:
    """The preprocess step of `sglang_processor`: a row ``{"id", "trajectory"}`` -> the chat ``messages``
    the judge's adapter builds (`StrictJSONAdapter.format`: the same messages the HTTP path sends) and the
    ``sampling_params`` (greedy, ``max_new_tokens``, the answer's JSON schema)."""

    def __init__(self, judge: TrajectoryJudge, max_tokens: int, temperature: float = 0.0,
                 max_string_length: int | None = None) -> None:
        self.judge = _plain_judge(judge)
        self.params: dict[str, Any] = {"temperature": temperature, "max_new_tokens": int(max_tokens)}
        schema = _json_schema(self.judge, max_string_length)
        if schema is not None:
            self.params["json_schema"] = schema

    def messages(self, trajectory: Trajectory) -> list[dict[str, Any]]:
        """The chat messages for `trajectory` (its label is never read).

        Args:
            trajectory: the `Trajectory` to judge.

        Returns:
            ``[{"role": "system", ...}, {"role": "user", ...}]`` as the judge's adapter formats them.
        """
        predictor = self.judge.judge
        messages: list[dict[str, Any]] = self.judge.adapter.format(predictor.signature, predictor.demos,
                                                                   self.judge.inputs_of(trajectory))
        return messages

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        trajectory = row_trajectory(row)
        return {"id": row["id"], "trajectory": trajectory, "messages": self.messages(trajectory),
                "sampling_params": dict(self.params)}


class JudgeAnswer:
    """The postprocess step of `sglang_processor`: the engine's ``generated_text`` -> a verdict line
    (``{"id", "line"}``, as the HTTP workers return). The strict adapter parses it; an answer cut at
    ``max_tokens`` (``finish_reason`` "length" when the row carries one; otherwise
    ``num_generated_tokens >= max_tokens``, which is what SGLang's "length" means) is an abstention
    (``truncated``), as are unparsable (``parse``) and wrong-typed (``invalid``) answers."""

    def __init__(self, judge: TrajectoryJudge, max_tokens: int, job_line: dict[str, Any]) -> None:
        self.judge = _plain_judge(judge)
        self.max_tokens = int(max_tokens)
        self.job_line = job_line

    def verdict(self, row: dict[str, Any]) -> Verdict:
        """The verdict (or abstention) in the engine's answer of `row`.

        Args:
            row: the engine's output row (``generated_text``, ``num_generated_tokens``, maybe ``finish_reason``).

        Returns:
            A produced `Verdict` (contradiction rule and operating point applied), or an abstention.
        """
        text = row.get("generated_text") or ""
        finish = row.get("finish_reason")
        generated = row.get("num_generated_tokens")
        signature = self.judge.judge.signature
        if finish == "length" or (finish is None and generated is not None and int(generated) >= self.max_tokens):
            error = VerdictFormatError("truncated", signature, text,
                                       f"the answer was cut at max_tokens={self.max_tokens} (finish reason 'length')")
            return Verdict.abstention(error, "truncated")
        try:
            fields = self.judge.adapter.parse(signature, text)
            return as_verdict(self.judge._prediction(dspy.Prediction(**fields)))
        except VerdictFormatError as error:
            return Verdict.abstention(error, error.kind)
        except Exception as error:  # noqa: BLE001 - recorded, as judge_verdict records it
            return Verdict.abstention(error, error_kind(error))

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        verdict = self.verdict(row)
        line = verdict_line(row_trajectory(row), verdict, attempts=1, **self.job_line)
        return {"id": row["id"], "line": orjson.dumps(line)}


def sglang_processor(program: PathArg | TrajectoryJudge | None, config: SGLangEngineProcessorConfig, *,
                     max_tokens: int = 256, temperature: float = 0.0, max_string_length: int | None = None) -> Any:
    """A `ray.data.llm` processor running SGLang engines inside Ray (GPU nodes), for `judge_dataset`.

    Args:
        program: a frozen program path or a `TrajectoryJudge` (the plain judge only).
        config: a ``ray.data.llm.SGLangEngineProcessorConfig`` (``model_source``, ``engine_kwargs``,
            ``concurrency``, ``batch_size``, ``accelerator_type``).
        max_tokens: the answer's token budget (``max_new_tokens``); an answer that reaches it abstains.
        temperature: sampling temperature (0: greedy, as the HTTP path).
        max_string_length: ``maxLength`` added to the schema's strings (see `LMConfig`).

    Returns:
        The processor (``processor(ds)`` maps rows ``{"id", "trajectory"}`` to ``{"id", "line"}``), with
        ``rubricforge_job`` set to what `judge_dataset` needs to fingerprint the job (an attribute Ray's
        ``Processor`` type does not declare: hence ``Any``).
    """
    ray_module()
    from ray.data import llm as ray_llm

    judge = _plain_judge(judge_from(program))
    lm = make_lm(LMConfig(model=config.model_source, api_base=SGLANG_ENDPOINT, max_tokens=max_tokens,
                          temperature=temperature, max_string_length=max_string_length))
    line = job_line(judge, lm)
    # `build_llm_processor`: older Ray's name (Ray's stubs know the current one only); looked up by name so the
    # lint reads the same with or without Ray installed
    build = getattr(ray_llm, "build_processor", None) or getattr(ray_llm, "build_llm_processor", None)
    if build is None:
        raise MissingExtraError("this Ray has neither ray.data.llm.build_processor nor build_llm_processor: "
                                "install a Ray with Ray Data LLM (pip install 'ray[data,llm]')")
    processor = build(config, preprocess=JudgePrompt(judge, max_tokens, temperature, max_string_length),
                      postprocess=JudgeAnswer(judge, max_tokens, line))
    processor.rubricforge_job = {"judge": judge, "lm": lm}
    return processor
