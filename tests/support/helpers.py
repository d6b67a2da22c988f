"""Small builders for synthetic trajectories used across tests, and where the optional test data lives."""

from __future__ import annotations

from pathlib import Path

from rubricforge_dspy.core.trajectory import Source, Step, Trajectory

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "evals" / "data"
SHARED_RAW = REPO.parent / "shared" / "data" / "raw"
AIRLINE = BUNDLED / "tau_bench_official" / "gpt-4o-airline.json"
# one shipped sample per format the symptom floor is tested on
SHIPPED = {
    "tau_bench": BUNDLED / "tau_bench_official" / "gpt-4o-airline.json",
    "tau_bench_grok": next((BUNDLED / "tau_bench_grok").glob("*.json")),
    "webshop_react": BUNDLED / "react_webshop" / "react_webshop_davinci002_500.jsonl",
    "adapt": BUNDLED / "adapt" / "ADaPT_maxd3_webshop_gpt-3.5-turbo.json",
}


def shared_missing(path: Path = SHARED_RAW) -> str:
    """The skip reason of a test that needs `path` under the shared raw data beside the repo."""
    where = path.relative_to(REPO.parent) if path.is_relative_to(REPO.parent) else path
    return (f"../{where} not found beside the repo ({path}): the raw benchmark logs live in a `shared/` "
            "checkout next to the repo's directory (the CI clone has it; a bare clone does not)")


def bundled_missing(path: Path) -> str:
    """The skip reason of a test that needs `path` under the repo's evals/data (committed with the repo)."""
    return (f"{path.relative_to(REPO)} not found in this checkout ({path}): it is committed under evals/data; "
            "restore it with `git checkout -- evals/data`")


def make_trajectory(index: int, *, success: bool, task: str | None = None, domain: str = "airline",
                    agent: str = "test-agent", trial: int = 0) -> Trajectory:
    """A booking episode: successful ones commit cleanly; failed ones hit a tool error yet claim success."""
    steps = [
        Step("user", f"Please book flight HAT{index:03d} for me."),
        Step("tool_call", tool_name="search_flights", arguments={"flight": f"HAT{index:03d}"}, call_id="c1"),
        Step("tool_result", content='{"available": true}', tool_name="search_flights", call_id="c1"),
        Step("assistant", "I found it. Shall I book it?"),
        Step("user", "Yes, please."),
        Step("tool_call", tool_name="book_reservation", arguments={"flight": f"HAT{index:03d}"}, call_id="c2"),
    ]
    if success:
        steps.append(Step("tool_result", content='{"reservation_id": "R1"}', tool_name="book_reservation",
                          call_id="c2"))
    else:
        steps.append(Step("tool_result", content="Error: payment method not found", tool_name="book_reservation",
                          call_id="c2", is_error=True))
    steps.append(Step("final_answer", "Your flight is booked!"))
    return Trajectory(
        id=f"synthetic:{task or index}:{trial}", task_id=task or f"t{index}", domain=domain, agent=agent,
        steps=tuple(steps), reward=1.0 if success else 0.0, label=int(success),
        source=Source("synthetic.jsonl", index), trial=trial,
        hidden={"gold_actions": "CANARY-GOLD", "instruction": "CANARY-INSTRUCTION"},
    )


def make_dataset(n: int = 24, trials: int = 1, domain: str = "airline") -> list[Trajectory]:
    out = []
    for i in range(n):
        for trial in range(trials):
            out.append(make_trajectory(i, success=(i % 2 == 0), task=f"t{i}", trial=trial, domain=domain))
    return out
