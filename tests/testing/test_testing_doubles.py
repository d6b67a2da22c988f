"""The test doubles of `rubricforge_dspy.testing`: the DSPy hooks the scripted LM relies on, its behaviour
through `dspy.Predict` (as a real LM: history, usage, finish reason), and the package's documented entry points."""

import asyncio
import inspect
import re
import subprocess
import sys

import dspy
import pytest

import rubricforge_dspy.testing as testing
from rubricforge_dspy.lm.truncation import TruncatedCompletionError
from rubricforge_dspy.testing.fake_server import estimate_tokens
from rubricforge_dspy.testing.scripted import (
    Cut,
    ScriptedEngine,
    ScriptedLM,
    format_fields,
    last_user_text,
    system_text,
)

HOOK = ("rubricforge_dspy.testing.scripted.format_fields uses the private DSPy hook "
        "dspy.adapters.chat_adapter.FieldInfoWithName + Adapter.format_field_with_value(fields_with_values, role=...)")


def test_the_private_dspy_hook_still_exists_as_the_scripted_lm_uses_it():
    try:
        from dspy.adapters.chat_adapter import FieldInfoWithName
    except ImportError as error:
        pytest.fail(f"DSPy {dspy.__version__} changed a hook: {HOOK}; FieldInfoWithName is gone ({error})")
    assert {"name", "info"} <= set(FieldInfoWithName._fields), f"DSPy {dspy.__version__} changed a hook: {HOOK}"
    for adapter in (dspy.JSONAdapter, dspy.ChatAdapter):
        method = getattr(adapter, "format_field_with_value", None)
        assert callable(method), f"DSPy {dspy.__version__}: {adapter.__name__} lost a hook: {HOOK}"
        params = inspect.signature(method).parameters
        assert "fields_with_values" in params, f"DSPy {dspy.__version__}: {adapter.__name__} changed a hook: {HOOK}"
    assert "role" in inspect.signature(dspy.JSONAdapter.format_field_with_value).parameters, \
        f"DSPy {dspy.__version__}: JSONAdapter.format_field_with_value takes no `role` any more: {HOOK}"
    # and the hook still writes what each adapter parses back
    written = format_fields(dspy.JSONAdapter(), {"a": "x", "b": 2})
    assert dspy.JSONAdapter().parse(dspy.Signature("q -> a, b: int"), written) == {"a": "x", "b": 2}
    written = format_fields(dspy.ChatAdapter(), {"a": "x"})
    assert dspy.ChatAdapter().parse(dspy.Signature("q -> a"), written) == {"a": "x"}


def test_the_public_dspy_engine_contract_the_scripted_lm_is_built_on():
    params = inspect.signature(dspy.LM.__init__).parameters
    assert {"engine", "async_engine"} <= set(params), \
        f"DSPy {dspy.__version__}: dspy.LM(engine=, async_engine=) changed; ScriptedLM passes its ScriptedEngine there"
    lm = ScriptedLM(lambda m: "x")
    assert isinstance(lm, dspy.BaseLM) and isinstance(lm.engine, ScriptedEngine)
    assert not inspect.iscoroutinefunction(ScriptedEngine.complete)


def test_the_scripted_lm_answers_through_predict_as_a_real_lm_would():
    seen = []

    def respond(messages):
        seen.append(messages)
        return {"answer": f"echo {last_user_text(messages).count('sky')}"}

    lm = ScriptedLM(respond, model="scripted-echo")
    predict = dspy.Predict(dspy.Signature("question -> answer", "Answer briefly."))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        prediction = predict(question="Why is the sky blue?")

    assert prediction.answer == "echo 1" and lm.calls == 1
    messages = seen[0]
    assert messages[0]["role"] == "system" and "Answer briefly." in system_text(messages)
    assert messages[-1]["role"] == "user" and "Why is the sky blue?" in last_user_text(messages)

    entry = lm.history[-1]
    assert entry["model"] == "scripted-echo" and entry["messages"] == messages
    assert entry["response"].finish_reason == "stop" and entry["response"].model == "scripted-echo"
    prompt = "".join(m["content"] for m in messages)
    usage = entry["usage"]
    assert usage["prompt_tokens"] == estimate_tokens(prompt) > 1
    assert usage["completion_tokens"] == estimate_tokens(entry["outputs"][0])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_a_dict_answer_follows_the_lm_adapter_and_raw_text_is_sent_verbatim():
    chat = ScriptedLM(lambda m: {"answer": "blue"}, adapter=dspy.ChatAdapter())
    with dspy.context(lm=chat, adapter=dspy.ChatAdapter()):
        assert dspy.Predict("question -> answer")(question="sky?").answer == "blue"
    assert chat.history[-1]["outputs"][0].startswith("[[ ## answer ## ]]")
    raw = ScriptedLM(lambda m: "plain words")
    assert raw("hello") == ["plain words"]


def test_a_cut_answer_has_finish_reason_length_and_raises_like_the_real_engine():
    lm = ScriptedLM(lambda m: Cut('{"answer": "bl'))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()), pytest.raises(TruncatedCompletionError) as raised:
        dspy.Predict("question -> answer")(question="sky?")
    assert raised.value.partial == '{"answer": "bl' and lm.calls == 1


def test_copies_count_and_record_apart_and_async_calls_work():
    lm = ScriptedLM(lambda m: {"answer": "a"})
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        predict(question="one")
    copy = lm.copy(temperature=0.7)
    assert isinstance(copy, ScriptedLM) and copy.kwargs["temperature"] == 0.7 and lm.kwargs["temperature"] == 0.0
    with dspy.context(lm=copy, adapter=dspy.JSONAdapter()):
        predict(question="two")

    async def twice():
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            return await predict.acall(question="three")

    assert asyncio.run(twice()).answer == "a"
    assert (lm.calls, copy.calls) == (2, 2) and (len(lm.history), len(copy.history)) == (2, 1)


def test_the_package_exports_its_entry_points_and_its_examples_run():
    for name in testing.__all__:
        assert getattr(testing, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        testing.nothing  # noqa: B018
    examples = re.findall(r"::\n\n((?:      .*\n|\n)+)", testing.__doc__)
    assert len(examples) == 2
    namespace = {}
    for block in examples:  # the docstring's examples assert their own outcome
        exec("\n".join(line[6:] for line in block.splitlines()), namespace)


def test_the_fake_server_imports_without_dspy():
    code = ("import sys, rubricforge_dspy.testing as t; t.FakeOpenAI; t.FakeBatches; "
            "print('dspy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
