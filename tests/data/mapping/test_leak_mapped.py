"""The leak canaries of tests/test_leak.py, for mapped data: in a copy of every shipped mapping sample, every
field a mapping reads for the reward, the label or ``hidden`` is replaced by a canary (the label field by a
canary pass/fail value, the mapping's value set rewritten to match; the reward by a value with canary digits),
the copy is loaded with ``load_trajectories(..., mapping=...)``, and no canary reaches the rendered text. The
loaded labels, rewards and hidden values prove the canaries were really read."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.formats.mapping import ValueSetRule, load_mapping
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from tests.support.mapping_samples import SAMPLES

CANARY = "CANARY7f3a"
PASS, FAIL = f"{CANARY}.pass", f"{CANARY}.fail"
REWARD_DIGITS = 0.0315926  # added to every reward: the label under 'reward >= 1' / '> 0.5' is unchanged
FULL_VIEW = RenderConfig(max_tokens=10**7, max_step_chars=10**7)  # render everything, hide nothing
_SIMPLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _get(record: dict, path: str):
    for key in path.split("."):
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record


def _set(record: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        record = record.setdefault(key, {})
    record[last] = value


def _read_document(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)


def _poisoner(mapping_path: Path):
    """``(poison(record), poisoned mapping document)``: what is replaced in each record, and the mapping with
    its value set rewritten to the canary values."""
    mapping, document = load_mapping(mapping_path), _read_document(mapping_path)
    hidden = {name: expr.text for name, expr in mapping.hidden.items()}
    reward = mapping.fields["reward"].text if "reward" in mapping.fields else None
    rule = mapping.label_rule if isinstance(mapping.label_rule, ValueSetRule) else None
    for path in [*hidden.values(), *([reward] if reward else []), *([rule.field] if rule else [])]:
        assert _SIMPLE.match(path), f"{mapping_path}: {path!r} is not a plain field path this test can poison"
    if rule is not None:
        document["label"] = {"field": rule.field, "pass": [PASS], "fail": [FAIL]}

    def poison(record: dict) -> None:
        for name, path in hidden.items():
            _set(record, path, f"{CANARY}.hidden.{name}")
        if reward is not None and isinstance(_get(record, reward), (int, float)):
            _set(record, reward, _get(record, reward) + REWARD_DIGITS)
        if rule is not None and _get(record, rule.field) is not None:
            _set(record, rule.field, PASS if rule.label(_get(record, rule.field)) else FAIL)
    return poison, document


def _poisoned_copy(sample, tmp_path: Path) -> tuple[Path, Path]:
    """``(data, mapping)``: the sample's data with every record poisoned, and the poisoned mapping."""
    poison, document = _poisoner(sample.mapping)
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps(document), encoding="utf-8")
    layout = load_mapping(sample.mapping)
    target = tmp_path / sample.data.name
    if layout.source == "jsonl":
        records = [json.loads(line) for line in sample.data.read_text(encoding="utf-8").splitlines() if line.strip()]
        for record in records:
            poison(record)
        target.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    elif layout.source == "json":
        assert layout.records_path == "*", "this test poisons a dict of records"
        records = json.loads(sample.data.read_text(encoding="utf-8"))
        for record in records.values():
            poison(record)
        target.write_text(json.dumps(records), encoding="utf-8")
    else:  # one file per record
        shutil.copytree(sample.data, target)
        for file in sorted(target.rglob("*.json")):
            record = json.loads(file.read_text(encoding="utf-8"))
            if isinstance(record, dict):
                poison(record)
                file.write_text(json.dumps(record), encoding="utf-8")
    return target, mapping


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_no_label_reward_or_hidden_canary_reaches_the_render(name, tmp_path):
    sample = SAMPLES[name]
    original = load_trajectories(sample.data, mapping=sample.mapping, on_error="skip")
    data, mapping = _poisoned_copy(sample, tmp_path)
    poisoned = load_trajectories(data, mapping=mapping, on_error="skip")
    assert [t.id for t in poisoned] == list(sample.ids)
    assert [t.label for t in poisoned] == list(sample.labels)  # read from the canary values
    for before, after in zip(original, poisoned, strict=True):
        if before.reward is not None:
            assert after.reward == pytest.approx(before.reward + REWARD_DIGITS)
        assert all(CANARY in str(value) for key, value in after.hidden.items()
                   if key in load_mapping(mapping).hidden), after.hidden
        text = render_trajectory(after, FULL_VIEW)
        assert CANARY not in text, f"{after.id}: {text[text.index(CANARY) - 80:][:200]}"
        assert "0315926" not in text, f"{after.id}: the reward leaked"


def test_the_canary_would_be_seen_if_it_leaked(tmp_path):
    """Control: a canary in a field the mapping reads as observable (the task) does reach the render."""
    sample = SAMPLES["intercode_bash"]
    records = json.loads(sample.data.read_text(encoding="utf-8"))
    for record in records.values():
        record["query"] = f"{CANARY} in the task"
    data = tmp_path / sample.data.name
    data.write_text(json.dumps(records), encoding="utf-8")
    loaded = load_trajectories(data, mapping=sample.mapping)
    assert loaded and all(CANARY in render_trajectory(t, FULL_VIEW) for t in loaded)
