"""What each read mode shows of a long episode, and what it costs: issue 40's benchmark.

    PYTHONPATH=. python -m evals.bench_long_episodes [--out evals/results/long_episodes.json]

For every public coding-agent trajectory shipped in evals/data (mini-SWE-agent, SWE-agent, OpenHands, and
the ATIF terminal-agent logs), and for each preset's render budget (``server`` 22k estimated tokens,
``embedded`` 900; `core.presets`), three read modes judge the episode against the project's fake
OpenAI-compatible server on 127.0.0.1 (`rubricforge_dspy.testing.fake_server`):

- ``budget``: `TrajectoryJudge`, one render fitted to the budget (today's default). Its accounting is
  the render's own output: the ``[... N steps elided ...]`` markers (N summed), the steps shown clipped
  (a ``[... N chars elided ...]`` or structural ``... N more items/keys`` cut inside the step's line), and
  the characters cut (the N of each ``chars elided`` marker plus every character of an elided step).
- ``segments``: `SegmentsJudge` (judge/segments.py), windows that each fit the budget, then a verdict call.
- ``explore``: `ExplorerJudge` (judge/explorer.py) driven by a SCRIPTED tool-calling policy (no model
  chooses its actions): ``outline``, ``symptoms``, ``read_step`` on up to `POLICY_READS` steps the
  outline or the symptoms mark as errors (else the quartiles), ``final_answer``, ``verdict``. What it
  reads is the policy's choice: its numbers say what the tools and caps cost, not what a model would read.

Every judge gets the rubric of the shipped program programs/airline-smollm2-135m.json. The fake server
answers with a SCRIPTED judge (window findings cite the steps marked ERROR in the excerpt; verdicts fail an
episode whose evidence shows an error): verdicts are simulated and say nothing of judging quality.

Measured per verdict, from the chat requests the server really received (one item at a time):
- requests (LM calls), prompt characters, prompt tokens (`evidence.tokens.estimate_tokens`, the package's
  conservative estimator that sizes the render budget, over every message of every request) and
  the fake server's reported usage (4 characters a token);
- steps reaching the LM: a step is ``whole`` when its whole rendered line (`judge._reading.QuotedSteps`,
  the renderer's quoting) is in some request, ``clipped`` when only its head is, ``unseen`` otherwise;
- for ``budget``, the render's own accounting (above) and whether its elided count equals the steps unseen;
  for ``segments``/``explore``, the judge's own ``evidence`` dict (the verdict line's field);
- whether each step the symptom floor flags (`evidence.symptoms`, tool errors) reaches the LM: its line
  (whole or clipped), and separately the floor's own note on it (``step N: the call to ... returned an
  ERROR (snippet)``, which only the explorer's ``symptoms`` tool sends);
- wall time of the item (context only: a 2-core VM shared with other work; never a target).

Results are aggregated by episode length bucket (`BUCKETS`, steps). No shipped trajectory has 100 or more
steps (the longest is a 66-step OpenHands episode), so the 100+ bucket is empty and said to be; the
shipped SWE-agent and mini-SWE-agent samples are themselves trimmed (their text says ``trimmed N chars for
the sample``), so real episodes of the same length are longer in characters than these.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "evals" / "data"
FILES = [
    "mini_swe/github_issue.traj.json", "mini_swe/local.traj.json",
    "swe_agent/marshmallow-code__marshmallow-1867.traj", "swe_agent/pydicom__pydicom-1458.traj",
    "openhands/basic.json", "openhands/multi_swe_bench_output.jsonl",
    "atif/openagents-regex-log/20251211-161750-ba4ddb16", "atif/hello-world__abc123/agent",
]
PROGRAM = ROOT / "programs" / "airline-smollm2-135m.json"
BUCKETS = [(1, 15), (16, 40), (41, 99), (100, None)]
MODES = ("budget", "segments", "explore")
POLICY_READS = 4
STEPS_ELIDED = re.compile(r"\[\.\.\. (\d+) steps? elided to fit the token budget \.\.\.\]")
CHARS_ELIDED = re.compile(r"\[\.\.\. (\d+) chars elided \.\.\.\]")
STRUCTURAL = re.compile(r"\.\.\. \d+ more (?:items|keys)|\.\.\. \d+ chars \.\.\.")
ERROR_LINE = re.compile(r"(?m)^\[(\d+)\] [A-Z ]+?(?: \S+)? \(ERROR\)")
CITED = re.compile(r"\[(\d+)\]")


def bucket_of(steps: int) -> str:
    for low, high in BUCKETS:
        if steps >= low and (high is None or steps <= high):
            return f"{low}-{high}" if high else f"{low}+"
    raise ValueError(steps)


# -- the scripted judge behind the fake server -------------------------------------------------------------

def _field(text: str, name: str) -> str:
    """The value of DSPy's ``[[ ## name ## ]]`` input section in a user message."""
    marker = f"[[ ## {name} ## ]]"
    if marker not in text:
        return ""
    return text.split(marker, 1)[1].split("[[ ## ", 1)[0]


def _policy(transcript: str) -> dict[str, Any]:
    """The scripted explorer: outline, symptoms, read up to POLICY_READS error steps, final answer, verdict.
    It decides from what the tools returned (the transcript), never from the trajectory itself."""
    done = re.findall(r"(?m)^#(\d+) (\w+)\('([^']*)'\)", transcript)
    actions = [a for _, a, _ in done]
    empty = {"passed": False, "score": 0.0, "reason": ""}
    if "outline" not in actions:
        return {"action": "outline", "argument": "", **empty}
    if "symptoms" not in actions:
        return {"action": "symptoms", "argument": "", **empty}
    read = [int(arg) for _, a, arg in done if a == "read_step" and arg.isdigit()]
    flagged = [int(n) for n in re.findall(r"\[(\d+)\] [^\n]*\(ERROR\)", transcript)]
    flagged += [int(n) for n in re.findall(r"step (\d+): the call to", transcript)]
    total = re.search(r"numbered 1 to (\d+)", transcript)
    wanted = list(dict.fromkeys(flagged))
    if not wanted and total:
        n = int(total.group(1))
        wanted = list(dict.fromkeys(max(1, round(n * q)) for q in (0.25, 0.5, 0.75)))
    todo = [n for n in wanted if n not in read]
    if len(read) < POLICY_READS and todo:
        return {"action": "read_step", "argument": str(todo[0]), **empty}
    if "final_answer" not in actions:
        return {"action": "final_answer", "argument": "", **empty}
    errors = sorted(set(flagged))
    return {"action": "verdict", "argument": "", "passed": not errors, "score": 0.2 if errors else 0.8,
            "reason": f"tool errors at {', '.join(f'[{n}]' for n in errors[:4])}" if errors else "no error seen"}


def answer(body: dict, n: int) -> str:
    """The fake server's scripted reply to one chat request, by the signature it carries."""
    user = "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "user")
    if "[[ ## transcript ## ]]" in user:  # the explorer
        record = _field(user, "record")
        return json.dumps(_policy(record + "\n" + _field(user, "transcript")))
    if "[[ ## excerpt ## ]]" in user:  # a segments window
        errors = sorted({int(n) for n in ERROR_LINE.findall(_field(user, "excerpt"))})
        return json.dumps({"findings": ("tool errors at " + ", ".join(f"[{e}]" for e in errors)) if errors
                           else "none"})
    if "[[ ## overview ## ]]" in user:  # the segments verdict
        cited = CITED.findall(_field(user, "findings"))
        failing = "tool errors" in _field(user, "findings")
        return json.dumps({"passed": not failing, "score": 0.2 if failing else 0.8,
                           "reason": f"findings cite [{cited[0]}]" if cited else "nothing found"})
    errors = ERROR_LINE.findall(_field(user, "trajectory"))  # the budgeted render
    return json.dumps({"reason": f"tool error at [{errors[0]}]" if errors else "no error shown",
                       "passed": not errors, "score": 0.2 if errors else 0.8})


# -- what reached the LM ------------------------------------------------------------------------------------

def request_text(body: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []))


def step_reach(quoted, texts: list[str]) -> list[str]:
    """For each step: ``whole`` (its whole quoted line is in some request), ``clipped`` (only its head:
    the line up to a few characters after its opening quote tag) or ``unseen``."""
    out = []
    for i in range(len(quoted)):
        whole = quoted.line(i, None)[0]
        opening = whole.find(quoted.fence[0])
        head = whole[:opening + len(quoted.fence[0]) + 8] if opening >= 0 else whole[:40]
        if any(whole in t for t in texts):
            out.append("whole")
        elif any(head in t for t in texts):
            out.append("clipped")
        else:
            out.append("unseen")
    return out


def render_accounting(text: str, quoted, reach: list[str]) -> dict[str, Any]:
    """The render's own statement of what it cut (module docstring), beside what reached the LM."""
    elided = sum(int(n) for n in STEPS_ELIDED.findall(text))
    unseen = [i for i, r in enumerate(reach) if r == "unseen"]
    return {"elision_markers": len(STEPS_ELIDED.findall(text)), "elided": elided,
            "clipped": sum(r == "clipped" for r in reach),
            "chars_elided_markers": len(CHARS_ELIDED.findall(text)),
            "structural_cuts": len(STRUCTURAL.findall(text)),
            "chars_cut": sum(int(n) for n in CHARS_ELIDED.findall(text)) + sum(quoted.body_chars(i) for i in unseen),
            "elided_equals_unseen": elided == len(unseen)}


# -- the run ------------------------------------------------------------------------------------------------

def make_judge(mode: str, rubric: str, render):
    from rubricforge_dspy.judge.explorer import ExplorerJudge
    from rubricforge_dspy.judge.module import TrajectoryJudge
    from rubricforge_dspy.judge.segments import SegmentsJudge

    if mode == "budget":
        return TrajectoryJudge(rubric=rubric, render_config=render)
    if mode == "segments":
        return SegmentsJudge(rubric, render_config=render)
    return ExplorerJudge(rubric, render_config=render)


class FakeLog:
    """The requests the fake server received, and its usage counts."""

    def __init__(self, server):
        self.server = server

    def mark(self) -> tuple[int, dict[str, int]]:
        return len(self.server.chat_bodies), dict(self.server.usage)

    def since(self, mark) -> tuple[list[dict], dict[str, int]]:
        first, usage = mark
        return self.server.chat_bodies[first:], {k: self.server.usage[k] - usage[k] for k in usage}


class HistoryLog:
    """The requests a `dspy.LM` sent (its ``history``: messages and the usage the server reported)."""

    def __init__(self, lm):
        self.lm = lm

    def mark(self) -> int:
        return len(self.lm.history)

    def since(self, mark) -> tuple[list[dict], dict[str, int]]:
        entries = self.lm.history[mark:]
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for entry in entries:
            for key in usage:
                usage[key] += int((entry.get("usage") or {}).get(key) or 0)
        return [{"messages": e.get("messages") or []} for e in entries], usage


def judge_one(judge, mode: str, trajectory, log) -> dict[str, Any]:
    from rubricforge_dspy.evidence.symptoms import extract_symptoms
    from rubricforge_dspy.evidence.tokens import estimate_tokens
    from rubricforge_dspy.judge._reading import QuotedSteps
    from rubricforge_dspy.judge.execution import judge_verdict

    mark = log.mark()
    started = time.perf_counter()
    if mode == "budget":
        verdict, prediction = judge_verdict(judge, judge.render(trajectory)), None
    else:
        try:
            prediction, verdict = judge(trajectory=trajectory), None
        except Exception as error:  # noqa: BLE001 - counted, never a verdict
            prediction, verdict = None, error
    wall = time.perf_counter() - started
    bodies, served = log.since(mark)
    texts = [request_text(b) for b in bodies]
    quoted = QuotedSteps(trajectory)
    reach = step_reach(quoted, texts)
    symptom_steps = sorted({number for number, _, _ in extract_symptoms(trajectory).tool_errors})
    row: dict[str, Any] = {
        "steps": len(trajectory.steps), "bucket": bucket_of(len(trajectory.steps)),
        "chars": sum(quoted.body_chars(i) for i in range(len(quoted))),
        "requests": len(bodies), "prompt_chars": sum(len(t) for t in texts),
        "prompt_tokens_est": sum(estimate_tokens(t) for t in texts),
        "prompt_tokens_served": served["prompt_tokens"],
        "completion_tokens_served": served["completion_tokens"],
        "reach": {k: reach.count(k) for k in ("whole", "clipped", "unseen")},
        "symptom_steps": symptom_steps,
        "symptom_steps_reaching_lm": [n for n in symptom_steps if reach[n - 1] != "unseen"],
        # the floor's own line about the step (the explorer's `symptoms` tool sends these; a render does not)
        "symptom_notes_reaching_lm": [n for n in symptom_steps if any(f"step {n}: the call to" in t for t in texts)],
        "wall_s": round(wall, 3),
    }
    if mode == "budget":
        row["render"] = render_accounting(judge.render(trajectory), quoted, reach)
        row["verdict"] = "abstained" if verdict.abstained else ("pass" if verdict.passed else "fail")
    elif prediction is None:
        row["verdict"], row["error"] = "abstained", f"{type(verdict).__name__}: {verdict}"[:300]
    else:
        row["verdict"] = "pass" if prediction.passed else "fail"
        row["evidence"] = {k: v for k, v in prediction.evidence.items() if k != "steps_read"}
        row["evidence"]["steps_read"] = prediction.evidence["steps_read"]
        row["calls_reported"] = prediction.calls
        # the judge's own account (the verdict line's evidence) against what the requests really held
        evidence = prediction.evidence
        row["evidence_matches_requests"] = (evidence["whole"], evidence["clipped"], evidence["elided"]) == \
            (reach.count("whole"), reach.count("clipped"), reach.count("unseen")) and prediction.calls == len(bodies)
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per length bucket: items, steps, and per-verdict means of requests and prompt tokens, shares of
    steps whole/clipped/unseen, symptom steps reaching the LM, abstentions."""
    out: dict[str, Any] = {}
    for low, high in BUCKETS:
        name = f"{low}-{high}" if high else f"{low}+"
        group = [r for r in rows if r["bucket"] == name]
        if not group:
            out[name] = {"items": 0, "note": "no shipped trajectory of this length"}
            continue
        steps = sum(r["steps"] for r in group)
        out[name] = {
            "items": len(group), "steps": steps,
            "requests_per_verdict": round(statistics.mean(r["requests"] for r in group), 2),
            "prompt_tokens_est_per_verdict": round(statistics.mean(r["prompt_tokens_est"] for r in group)),
            "prompt_tokens_est_max": max(r["prompt_tokens_est"] for r in group),
            "share_whole": round(sum(r["reach"]["whole"] for r in group) / steps, 3),
            "share_clipped": round(sum(r["reach"]["clipped"] for r in group) / steps, 3),
            "share_unseen": round(sum(r["reach"]["unseen"] for r in group) / steps, 3),
            "symptom_steps": sum(len(r["symptom_steps"]) for r in group),
            "symptom_steps_reaching_lm": sum(len(r["symptom_steps_reaching_lm"]) for r in group),
            "symptom_notes_reaching_lm": sum(len(r["symptom_notes_reaching_lm"]) for r in group),
            "abstained": sum(r["verdict"] == "abstained" for r in group),
            "wall_s_per_verdict": round(statistics.mean(r["wall_s"] for r in group), 3),
        }
    return out


def run(files: list[str]) -> dict[str, Any]:
    from rubricforge_dspy.core.presets import PRESETS
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.evidence.render import RENDER_VERSION, RenderConfig
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.lm.config import LMConfig
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.testing.fake_server import FakeOpenAI

    rubric = load_judge(PROGRAM, check_certificate=False).rubric
    episodes = [(name, t) for name in files for t in load_trajectories(DATA / name)]
    result: dict[str, Any] = {"presets": {}}
    with FakeOpenAI(answer, keep_alive=True) as server:
        lm = make_lm(LMConfig(model=server.model, api_base=server.api_base, num_retries=0, timeout=30))
        for preset_name in ("server", "embedded"):
            preset = PRESETS[preset_name]
            render = RenderConfig.of(preset)
            modes: dict[str, Any] = {}
            for mode in MODES:
                judge = make_judge(mode, rubric, render)
                judge.set_lm(lm)
                started = time.perf_counter()
                rows = []
                for name, trajectory in episodes:
                    row = judge_one(judge, mode, trajectory, FakeLog(server))
                    rows.append({"file": name, "id": trajectory.id, **row})
                    print(f"{preset_name:8} {mode:8} {name[:40]:40} steps={row['steps']:3} "
                          f"requests={row['requests']:2} tokens={row['prompt_tokens_est']:6} "
                          f"unseen={row['reach']['unseen']:3} {row['verdict']}", file=sys.stderr)
                modes[mode] = {"wall_s": round(time.perf_counter() - started, 2), "by_bucket": summarize(rows),
                               "items": rows}
            result["presets"][preset_name] = {"render_tokens": preset.render_tokens,
                                              "step_chars": preset.step_chars, "modes": modes}
    result.update({"render_version": RENDER_VERSION, "trajectories": len(episodes),
                   "longest_steps": max(len(t.steps) for _, t in episodes)})
    return result


def run_smollm2(files: list[str], items: int) -> dict[str, Any]:
    """The `items` shortest episodes judged by the embedded SmolLM2-135M (llama.cpp, CPU) in the ``budget`` and
    ``segments`` modes at the embedded preset: real requests and the token counts its server reports; its
    verdicts are meaningless (a 135M plumbing model) and its abstentions are counted, not hidden."""
    from rubricforge_dspy.core.presets import EMBEDDED
    from rubricforge_dspy.data.formats import load_trajectories
    from rubricforge_dspy.evidence.render import RenderConfig
    from rubricforge_dspy.judge.loading import load_judge
    from rubricforge_dspy.lm.engine import make_lm
    from rubricforge_dspy.serve.embedded import EmbeddedServer

    rubric = load_judge(PROGRAM, check_certificate=False).rubric
    episodes = sorted(((name, t) for name in files for t in load_trajectories(DATA / name)),
                      key=lambda item: len(item[1].steps))[:items]
    render = RenderConfig.of(EMBEDDED)
    out: dict[str, Any] = {"lm": "SmolLM2-135M-Instruct Q4_1 on llama.cpp (embedded), CPU: token counts are its "
                                 "server's; verdicts meaningless", "render_tokens": EMBEDDED.render_tokens,
                           "modes": {}}
    server = EmbeddedServer()
    with server as config:
        lm = make_lm(config)
        out["model"] = config.model
        for mode in ("budget", "segments"):
            judge = make_judge(mode, rubric, render)
            judge.set_lm(lm)
            started = time.perf_counter()
            rows = []
            for name, trajectory in episodes:
                row = judge_one(judge, mode, trajectory, HistoryLog(lm))
                rows.append({"file": name, "id": trajectory.id, **row})
                print(f"smollm2  {mode:8} {name[:40]:40} steps={row['steps']:3} requests={row['requests']:2} "
                      f"served={row['prompt_tokens_served']:6} {row['verdict']}", file=sys.stderr)
            out["modes"][mode] = {"wall_s": round(time.perf_counter() - started, 2), "items": rows}
    return out


def table(result: dict[str, Any]) -> str:
    """The Markdown table docs/LONG_EPISODES.md and evals/RESULTS.md quote, from a result JSON."""
    lines = ["| preset (render tokens) | mode | steps (items) | LM calls / verdict | prompt tokens / verdict (max) "
             "| steps whole / clipped / unseen | floor's error steps: line reaching the LM (floor's note) "
             "| abstained |",
             "|---|---|---|---|---|---|---|---|"]
    for preset, block in result["presets"].items():
        for mode, data in block["modes"].items():
            for bucket, row in data["by_bucket"].items():
                if not row["items"]:
                    continue
                lines.append(
                    f"| {preset} ({block['render_tokens']:,}) | {mode} | {bucket} ({row['items']}) "
                    f"| {row['requests_per_verdict']:g} "
                    f"| {row['prompt_tokens_est_per_verdict']:,} ({row['prompt_tokens_est_max']:,}) "
                    f"| {row['share_whole']:.0%} / {row['share_clipped']:.0%} / {row['share_unseen']:.0%} "
                    f"| {row['symptom_steps_reaching_lm']} of {row['symptom_steps']} "
                    f"({row['symptom_notes_reaching_lm']}) "
                    f"| {row['abstained']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "evals" / "results" / "long_episodes.json"))
    parser.add_argument("--smollm2", type=int, default=0, metavar="N",
                        help="also judge the N shortest episodes with the embedded SmolLM2-135M (budget and "
                             "segments modes; needs ./install.sh's llama.cpp server; default 0: skip)")
    parser.add_argument("--table", metavar="JSON", help="print the Markdown table of a result JSON and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    started = time.time()
    measured = run(FILES)
    if args.smollm2:
        measured["smollm2"] = run_smollm2(FILES, args.smollm2)
    result = {
        "benchmark": "issue 40: steps read and prompt tokens per verdict, by read mode and episode length",
        "command": "PYTHONPATH=. python -m evals.bench_long_episodes"
                   + (f" --smollm2 {args.smollm2}" if args.smollm2 else ""),
        "lm": "simulated: the fake OpenAI-compatible server on 127.0.0.1 (rubricforge_dspy.testing.fake_server) "
              "answering with a scripted judge; the explorer's actions are a scripted tool-calling policy "
              "(evals/bench_long_episodes.py:_policy). Verdicts are simulated; request and token counts are of "
              "the prompts really built and sent.",
        "rubric": str(PROGRAM.relative_to(ROOT)),
        "token_estimator": "rubricforge_dspy.evidence.tokens.estimate_tokens over every message of every request "
                           "(prompt_tokens_est); prompt_tokens_served is the fake server's 4-characters-a-token count",
        "data": FILES,
        "note": "No shipped trajectory has 100 or more steps (longest: the 66-step OpenHands episode): the 100+ "
                "bucket is empty. The shipped SWE-agent and mini-SWE-agent samples are trimmed in their text.",
        "machine": f"2-core VM shared with other work ({platform.machine()}, {platform.system()}, "
                   f"Python {platform.python_version()}); wall times are context, not targets",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        **measured,
        "wall_time_s": round(time.time() - started, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
