"""The contract with DSPy's private hooks (`rubricforge_dspy._dspy_compat`), exercised against the installed
DSPy: a DSPy upgrade that changes one fails here, naming it, and nowhere else first."""

from __future__ import annotations

import ast
from importlib.metadata import version
from pathlib import Path

import dspy

from rubricforge_dspy import _dspy_compat as compat
from rubricforge_dspy.testing import ScriptedLM

ROOT = Path(__file__).resolve().parents[1]


class Judged(dspy.Signature):
    """Judge the text."""

    text: str = dspy.InputField()
    passed: bool = dspy.OutputField()
    score: float = dspy.OutputField()
    reason: str = dspy.OutputField()


def test_the_hooks_were_read_from_the_installed_dspy():
    assert version("dspy") == compat.CHECKED_WITH, (
        f"DSPy {version('dspy')} is installed; rubricforge_dspy/_dspy_compat.py was checked against "
        f"{compat.CHECKED_WITH}: re-read each hook it names in the new release, then update CHECKED_WITH")


def test_input_keys_are_the_fields_with_inputs_marked():
    example = dspy.Example(trajectory="t", label=1)
    assert compat.input_keys(example) is None  # with_inputs never called
    assert compat.input_keys(example.with_inputs("trajectory")) == frozenset({"trajectory"})
    assert compat.input_keys(example.with_inputs("trajectory", "label")) == frozenset({"trajectory", "label"})
    assert compat.input_keys({"trajectory": "t"}) is None  # not an Example


def test_engine_specs_are_the_engines_an_lm_was_built_with_and_copies_keep_them():
    lm = ScriptedLM(lambda messages: {"passed": True, "score": 1.0, "reason": "ok"})
    engine, async_engine = compat.engine_specs(lm)
    assert engine.owner is lm and async_engine.sync is engine  # ScriptedLM passes this pair to dspy.LM
    assert lm.engine is engine  # DSPy's public read of the sync one agrees
    plain = dspy.LM("openai/some-model")
    assert compat.engine_specs(plain) == ("auto", None)
    replaced = plain.copy(engine=engine, async_engine=async_engine)
    assert compat.engine_specs(replaced) == (engine, async_engine) and compat.engine_specs(plain) == ("auto", None)
    assert compat.engine_specs(object()) == (None, None)


def test_json_response_format_is_dspys_plan_for_the_signature():
    planned = compat.json_response_format(dspy.JSONAdapter(), Judged)
    assert set(planned.model_json_schema()["properties"]) == {"passed", "score", "reason"}
    assert compat.json_response_format(dspy.JSONAdapter(), Judged, supports_schema=False) == {"type": "json_object"}
    assert compat.json_response_format(dspy.JSONAdapter(), Judged, supports_response_format=False) is None


def test_dspy_asks_a_planned_response_format_adapter_on_every_call():
    seen = []

    class Planned(compat.PlannedResponseFormat, dspy.JSONAdapter):
        def plan_response_format(self, lm, lm_kwargs, signature):
            seen.append(signature)
            lm_kwargs["response_format"] = {"type": "json_object"}

    lm = ScriptedLM(lambda messages: {"passed": True, "score": 0.9, "reason": "ok"})
    predict = dspy.Predict(Judged)
    with dspy.context(lm=lm, adapter=Planned()):
        prediction = predict(text="a text")
    assert prediction.passed is True and len(seen) == 1
    assert set(seen[0].output_fields) == {"passed", "score", "reason"}


def test_no_other_module_touches_a_private_dspy_name():
    """The compat module is the one file a DSPy upgrade can break through a private hook."""
    hooks = {"_input_keys", "_engine_spec", "_async_engine_spec", "_prepare_response_format"}
    found = []
    for path in sorted((ROOT / "rubricforge_dspy").rglob("*.py")):
        if path.name == "_dspy_compat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.attr if isinstance(node, ast.Attribute) else (
                node.value if isinstance(node, ast.Constant) else
                node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if name in hooks:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, "use rubricforge_dspy._dspy_compat instead:\n" + "\n".join(found)


def test_relay_adapter_call_marks_the_inner_call_exactly_when_the_adapter_marked_the_outer():
    import warnings

    from dspy.clients._deprecation import adapter_message_call

    inner = ScriptedLM(lambda messages: "ok")
    outer, messages = object(), [{"role": "user", "content": "hi"}]

    def warned(call):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        return [w for w in caught if "messages=" in str(w.message)]

    def relayed():
        with adapter_message_call(outer, messages), compat.relay_adapter_call(outer, inner, messages):
            inner(messages=messages)

    def unmarked():
        with compat.relay_adapter_call(outer, inner, messages):
            inner(messages=messages)

    assert not warned(relayed) and warned(unmarked)  # DSPy warns a user's messages= call, never its adapter's
