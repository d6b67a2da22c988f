"""No label leaks: plant canaries in every non-observable field of every shipped data file
(and every shared raw file, when present) and prove that none reaches the rendered text.

Observable, per format: the episode's messages/steps (minus the system prompt), and the user-facing
task text the agent was given. Everything else (reward, reward info, gold actions and outputs,
data hashes, the user simulator's instruction, evaluator fields, timings, costs, run metadata) is
replaced by a canary string, or for numbers by a canary value, before loading.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.data.formats import detect_format, iter_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from tests.support.agent_log_poison import AGENT_LOG_FORMATS, NO_OUTCOME_FORMATS, poison_agent_log
from tests.support.helpers import BUNDLED, shared_missing
from tests.support.helpers import SHARED_RAW as SHARED
from tests.support.swe_poison import SWE_FORMATS, poison_swe_file
from tests.support.trace_poison import TRACE_FORMATS, poison_trace_file

CANARY = "CANARY7f3a"
CANARY_REWARD = 0.7315926  # a reward no real file has; label = reward > 0 stays 1
FULL_VIEW = RenderConfig(max_tokens=10**7, max_step_chars=10**7)  # render everything, hide nothing


def _poison(value, path=""):
    """Every leaf becomes a canary: strings tagged with their path, numbers the canary value."""
    if isinstance(value, dict):
        return {k: _poison(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, bool) or value is None:
        return f"{CANARY}{path}"
    if isinstance(value, (int, float)):
        return CANARY_REWARD
    return f"{CANARY}{path}"


def _poison_tau_bench(records):
    out = []
    for r in records:
        traj = [m if m.get("role") != "system" else {**m, "content": f"{CANARY}.system"} for m in r.get("traj") or []]
        out.append({**r, "reward": CANARY_REWARD, "info": _poison(r.get("info", {}), ".info"), "traj": traj})
    return out


def _poison_tau2(data):
    keep = {"id", "task_id", "trial", "messages"}
    sims = []
    for s in data["simulations"]:
        poisoned = {k: (v if k in keep else _poison(v, f".{k}")) for k, v in s.items()}
        poisoned["reward_info"] = {**_poison(s.get("reward_info") or {}, ".reward_info"), "reward": CANARY_REWARD}
        poisoned["messages"] = [m if m.get("role") != "system" else {**m, "content": f"{CANARY}.system"}
                                for m in s["messages"]]
        sims.append(poisoned)
    poisoned_info = _poison(data.get("info", {}), ".info")
    poisoned_info.setdefault("environment_info", {})["domain_name"] = data["info"]["environment_info"]["domain_name"]
    return {**data, "info": poisoned_info, "tasks": _poison(data.get("tasks", []), ".tasks"), "simulations": sims}


def _poison_webshop(record):
    steps = [dict(s) for s in record["steps"]]
    # the evaluator's printed score is planted in the last observation too: the loader must strip it
    steps[-1]["observation"] = steps[-1]["observation"] + f"\nYour score (min 0.0, max 1.0): {CANARY_REWARD}"
    return {**record, "reward": CANARY_REWARD, "score_in_final_obs": CANARY_REWARD, "purchased": f"{CANARY}.p",
            "n_steps": CANARY_REWARD, "instruction": f"{CANARY}.instruction", "steps": steps}


def _poison_adapt(data):
    out = {}
    for key, record in data.items():
        if key == "overall":
            out[key] = _poison(record, ".overall")
        else:
            out[key] = {**record, "score": CANARY_REWARD, "success": f"{CANARY}.success"}
    return out


def _poison_generic(record):
    """A generic JSONL record (the converted multi-agent sets): its reward the canary (the label dropped so the
    reward decides it), every metadata leaf a canary."""
    record = {key: value for key, value in record.items() if key != "label"}
    return {**record, "reward": CANARY_REWARD, "metadata": _poison(record.get("metadata", {}), ".metadata")}


def poisoned_copy(path: Path, tmp_path: Path) -> Path:
    fmt = detect_format(path)
    target = tmp_path / path.parent.name / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt in ("webshop_react", "jsonl"):
        poison_line = _poison_webshop if fmt == "webshop_react" else _poison_generic
        lines = [json.dumps(poison_line(json.loads(line)))
                 for line in path.read_text().splitlines() if line.strip()]
        target.write_text("\n".join(lines) + "\n")
        return target
    if fmt in TRACE_FORMATS:
        return poison_trace_file(path, fmt, target)
    if fmt in AGENT_LOG_FORMATS:
        return poison_agent_log(path, fmt, target)
    if fmt in SWE_FORMATS:
        return poison_swe_file(path, fmt, target)
    data = json.loads(path.read_text())
    poison = {"tau_bench": _poison_tau_bench, "tau2": _poison_tau2, "adapt": _poison_adapt}[fmt]
    target.write_text(json.dumps(poison(data)))
    return target


def data_files(root: Path) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".json", ".jsonl", ".eval") or "error_classes" in path.name:
            continue
        try:
            detect_format(path)
        except ValueError:
            continue
        files.append(path)
    return files


def assert_no_leak(path: Path, tmp_path: Path) -> int:
    poisoned = poisoned_copy(path, tmp_path)
    rendered = 0
    for trajectory in iter_trajectories(poisoned, on_error="skip"):
        text = render_trajectory(trajectory, FULL_VIEW)
        assert CANARY not in text, f"{path.name} {trajectory.id}: {text[text.index(CANARY) - 80:][:200]}"
        assert str(CANARY_REWARD) not in text and "0.73159" not in text, f"{path.name} {trajectory.id}: reward leaked"
        if trajectory.hidden["format"] in SWE_FORMATS:  # these read no outcome: a planted flag must not label
            assert (trajectory.reward, trajectory.label) == (None, None)
        elif trajectory.hidden["format"] not in NO_OUTCOME_FORMATS:  # a mini-SWE file holds no outcome to read
            assert trajectory.reward == pytest.approx(CANARY_REWARD), "the canary must really be the reward"
        rendered += 1
    assert rendered > 0
    return rendered


@pytest.mark.parametrize("path", data_files(BUNDLED), ids=lambda p: p.name[:40])
def test_no_canary_reaches_the_judge_bundled(path, tmp_path):
    assert_no_leak(path, tmp_path)


@pytest.mark.skipif(not SHARED.exists(), reason=shared_missing(SHARED))
@pytest.mark.parametrize("path", data_files(SHARED) if SHARED.exists() else [SHARED], ids=lambda p: p.name[:40])
def test_no_canary_reaches_the_judge_shared(path, tmp_path):
    assert_no_leak(path, tmp_path)


def test_the_canary_would_be_seen_if_it_leaked(tmp_path):
    """Control: a canary planted in an observable field does reach the rendered text."""
    path = BUNDLED / "tau_bench_official" / "gpt-4o-airline.json"
    data = json.loads(path.read_text())[:1]
    data[0]["traj"][1]["content"] = f"{CANARY} in a user turn"
    target = tmp_path / "control" / path.name
    target.parent.mkdir()
    target.write_text(json.dumps(data))
    [trajectory] = list(iter_trajectories(target))
    assert CANARY in render_trajectory(trajectory, FULL_VIEW)
