"""A DSPy user's walkthrough: labeled episodes -> `RubricInducer.compile` -> `dspy.Evaluate` -> save and
reload -> the judge as a GEPA metric and as a TRL GRPO reward.

    python examples/walkthrough.py                       # offline: scripted LMs, a few seconds
    python examples/walkthrough.py --api-base http://127.0.0.1:30000/v1 --model Qwen/Qwen3-8B

Offline, the judge LM is a `ScriptedLM` (rubricforge_dspy.testing) that passes every episode unless the
rubric tells it to fail tool errors, and the scripted reflection LM proposes exactly that criterion: the
run shows the mechanics (the induced rubric beats the seed on held-out tasks), not a model's quality.
With ``--api-base/--model`` both LMs are that endpoint: the judge LM with its short answers (``max_tokens``
256: a verdict), the reflection LM with room for a whole rubric (``max_tokens`` 4096, `REFLECTION_DEFAULTS`),
as the command line configures them.

Data: ``examples/data/bookings.jsonl`` (32 synthetic booking episodes in the generic JSONL format; half
hit a tool error and still claim success). `rubricforge_dspy.data.load_examples` reads them
(any supported format, with ``labels=`` joins) as
``dspy.Example(trajectory=<Trajectory>, label=..., reward=...).with_inputs("trajectory")``.

Writes ``<out>/judge.json`` (the frozen program) and ``<out>/walkthrough.json`` (what was measured).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import dspy

from rubricforge_dspy.data import load_examples, to_examples
from rubricforge_dspy.data.split import split_by_task
from rubricforge_dspy.induction import RubricInducer, freeze_induced
from rubricforge_dspy.judge.loading import load_judge
from rubricforge_dspy.judge.metric import label_agreement
from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.rewards import as_reward_function
from rubricforge_dspy.trust.certificate import certificate_for

DATA = Path(__file__).resolve().parent / "data" / "bookings.jsonl"
ERROR_CRITERION = "7. Tool errors: fail the episode when the tool_errors counter is above zero."


def scripted_lms():
    """The offline judge and reflection LMs (see the module docstring)."""
    import re

    from rubricforge_dspy.core.rubric import SEED_RUBRIC
    from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text

    def judge(messages):
        errors = re.search(r"tool_errors=(\d+)", last_user_text(messages))
        if "tool_errors counter" in system_text(messages) and errors and int(errors.group(1)) > 0:
            return {"reason": "A tool call returned an error.", "passed": False, "score": 0.1}
        return {"reason": "The agent says the task is done.", "passed": True, "score": 0.9}

    def reflect(messages):
        return {"new_instruction": SEED_RUBRIC.replace("\n\nScoring:", f"\n{ERROR_CRITERION}\n\nScoring:")}

    return ScriptedLM(judge, model="scripted-judge"), ScriptedLM(reflect, model="scripted-reflection")


def endpoint_lms(api_base: str, model: str):
    """The judge and reflection LMs on one endpoint: a verdict is a few dozen tokens, a rubric a few
    thousand characters, so the reflection LM gets `REFLECTION_DEFAULTS` (a judge LM's 256 tokens would
    cut every rubric it writes, and GEPA would propose nothing)."""
    from dataclasses import replace

    from rubricforge_dspy.lm.config import REFLECTION_DEFAULTS, LMConfig
    from rubricforge_dspy.lm.engine import make_lm

    judge = LMConfig(model=model, api_base=api_base)
    return make_lm(judge), make_lm(replace(judge, **REFLECTION_DEFAULTS))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA), help="labeled trajectories (any supported format)")
    parser.add_argument("--out", default="artifacts/walkthrough", help="output directory")
    parser.add_argument("--api-base", help="an OpenAI-compatible endpoint (default: scripted LMs, offline)")
    parser.add_argument("--model", help="the endpoint's model (with --api-base)")
    parser.add_argument("--budget", type=int, default=60, help="GEPA metric calls")
    args = parser.parse_args(argv)
    if bool(args.api_base) != bool(args.model):
        parser.error("--api-base and --model go together")
    judge_lm, reflection_lm = endpoint_lms(args.api_base, args.model) if args.api_base else scripted_lms()
    out = Path(args.out)
    dspy.configure(lm=judge_lm)  # the judge LM, as for any DSPy program

    # 1. labeled data as dspy.Examples, split by task: the test tasks are never seen by induction
    examples = load_examples(args.data, require_label=True)
    split = split_by_task([example.trajectory for example in examples], (0.6, 0.0, 0.4), seed=0)
    trainset, testset = to_examples(split.train), to_examples(split.test)
    print(f"loaded {len(examples)} labeled episodes ({len(examples.report.load.skipped)} skipped): "
          f"{len(trainset)} train, {len(testset)} test examples")

    # 2. compile: GEPA evolves the student's rubric (valset=None: a split of trainset by task)
    inducer = RubricInducer(reflection_lm=reflection_lm, budget=args.budget, minibatch=3, seed=0,
                            certify=certificate_for)
    judge = inducer.compile(TrajectoryJudge(), trainset=trainset, testset=testset)
    details = judge.detailed_results
    print(f"compiled: {len(details.candidates)} candidate(s), chose #{details.best_index}: {details.selection}; "
          f"{details.reflection_failures} reflection answer(s) unusable (cut or unparsable)")
    print(f"certificate on the test tasks: false-pass rate {details.certificate['false_pass']['rate']} "
          f"on {details.certificate['false_pass']['n']} failed episode(s)")

    # 3. dspy.Evaluate: the seed judge against the compiled one, on the held-out examples. The metric is the
    # package's judge-vs-label agreement: a cascade's escalation (no stage sure: a person decides) is skipped and
    # counted, never scored as a fail, so `agreement.result(...)` is the agreement `rubricforge report` gives
    agreement = label_agreement()
    evaluate = dspy.Evaluate(devset=testset, metric=agreement, num_threads=1, display_progress=False)
    seed_result, compiled_result = agreement.result(evaluate(TrajectoryJudge())), agreement.result(evaluate(judge))
    seed_score, compiled_score = float(seed_result.agreement or 0.0), float(compiled_result.agreement or 0.0)
    print(f"dspy.Evaluate agreement on {len(testset)} test examples: seed {seed_score:.1f}%, "
          f"compiled {compiled_score:.1f}% ({compiled_result})")

    # 4. save (with the certificate measured above) and reload: certified for this judge LM, so no warning
    program = out / "judge.json"
    freeze_induced(judge, program, lm_name=getattr(judge_lm, "model", None))
    reloaded = load_judge(program)
    assert reloaded.rubric == judge.rubric
    print(f"saved and reloaded: {program}")

    # 5. the reloaded judge as a GEPA metric for an agent program (feedback names the failed criterion)
    metric = reloaded.as_metric(feedback=True)
    request = dspy.Example(request="Book flight HAT101 for me.").with_inputs("request")
    run = dspy.Prediction(trajectory={"thought_0": "Book it.", "tool_name_0": "book_reservation",
                                      "tool_args_0": {"flight": "HAT101"},
                                      "observation_0": "Error: payment method not found"},
                          answer="Your flight is booked!")
    feedback = metric(request, run, None, "agent", None)
    print(f"as a GEPA metric: score {feedback.score}, feedback: {feedback.feedback}")

    # 6. the reloaded judge as a TRL GRPO reward (conversational completions with tool calls)
    reward = as_reward_function(reloaded, max_concurrency=4)
    prompt = [{"role": "user", "content": "Book flight HAT101 for me."}]

    def rollout(ok: bool):
        result = '{"reservation_id": "R9"}' if ok else str({"error": "payment method not found"})
        return [{"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function",
                                 "function": {"name": "book_reservation", "arguments": {"flight": "HAT101"}}}]},
                {"role": "tool", "name": "book_reservation", "content": result},
                {"role": "assistant", "content": "Your flight is booked!"}]

    rewards = reward(prompts=[prompt, prompt], completions=[rollout(True), rollout(False)],
                     completion_ids=[[0], [0]], solution=["booked", "not booked"])
    print(f"as a TRL reward: {rewards} (abstained {reward.counters.abstained})")

    summary = {
        "judge_lm": getattr(judge_lm, "model", None), "reflection_lm": getattr(reflection_lm, "model", None),
        "simulated": not args.api_base, "train": len(trainset), "test": len(testset),
        "candidates": len(details.candidates), "best_index": details.best_index, "selection": details.selection,
        "reflection_failures": details.reflection_failures,
        "test_metrics": details.test_metrics, "certificate_false_pass": details.certificate["false_pass"],
        "evaluate": {"seed": seed_score, "compiled": compiled_score}, "program": str(program),
        "evaluate_detail": {"seed": seed_result.to_dict(), "compiled": compiled_result.to_dict()},
        "gepa_metric": {"score": feedback.score, "feedback": feedback.feedback},
        "trl_rewards": rewards, "reward_counters": {"judged": reward.counters.judged,
                                                    "abstained": reward.counters.abstained},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "walkthrough.json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {out / 'walkthrough.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
