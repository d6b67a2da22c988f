"""A ReAct agent run with a scripted LM (add, then divide by zero, then a claim that both worked), and the judge
as a DSPy metric over it with a fixed verdict."""

from __future__ import annotations

import dspy

from rubricforge_dspy.testing.scripted import ScriptedLM, last_user_text, system_text

QUESTION = "What is 2 + 3, and what is 1 / 0?"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


def agent_respond(messages):
    """A fixed ReAct policy: add, then divide by zero, then finish; the answer claims both worked."""
    if "next_tool_name" in system_text(messages):
        done = last_user_text(messages).count("[[ ## tool_name_")
        steps = [("Add first.", "add", {"a": 2, "b": 3}), ("Now divide.", "divide", {"a": 1, "b": 0}),
                 ("Done.", "finish", {})]
        thought, tool, args = steps[min(done, 2)]
        return {"next_thought": thought, "next_tool_name": tool, "next_tool_args": args}
    return {"reasoning": "2 + 3 = 5 and the division worked.", "answer": "5, and 1 / 0 = 0"}


def run_react():
    react = dspy.ReAct("question -> answer", tools=[add, divide], max_iters=5)
    with dspy.context(lm=ScriptedLM(agent_respond, model="scripted-agent"), adapter=dspy.JSONAdapter()):
        return react(question=QUESTION)


def example():
    return dspy.Example(question=QUESTION, answer="GOLD-ANSWER-CANARY").with_inputs("question")


def judging(verdict):
    """A scripted judge LM that answers `verdict(rendered text)`."""
    return ScriptedLM(lambda messages: verdict(last_user_text(messages)), model="scripted-judge")


def strict_verdict(text):
    if "(ERROR)" in text:
        return {"reason": "Grounded claims: the answer reports a result that an ERROR contradicts.",
                "passed": False, "score": 0.2}
    return {"reason": "The tool results support the answer.", "passed": True, "score": 0.8}
