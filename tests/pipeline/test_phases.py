"""Where a run's time goes: `PhaseClock` counts wall and CPU per phase, the CPU of child processes included, and
the report shows the phases recorded in run.json."""

from __future__ import annotations

import subprocess
import sys
import time

from rubricforge_dspy.pipeline.phases import PhaseClock, tree_cpu_seconds
from rubricforge_dspy.report.markdown import phases_section

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"


def test_a_phase_counts_the_cpu_of_a_child_process_still_running_and_of_one_that_ended():
    clock = PhaseClock()
    with clock.phase("a child that ends"):
        subprocess.run([sys.executable, "-c", BURN], check=True)
    with clock.phase("a child still running at the end"):
        child = subprocess.Popen([sys.executable, "-c", BURN + "time.sleep(30)\n"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the child has burnt its CPU (polled, no fixed sleep)
            _, scope = tree_cpu_seconds()
            if child.poll() is not None or scope == "process" or _child_cpu(child.pid) >= 0.4:
                break
            time.sleep(0.05)
    child.kill()
    child.wait()
    ended, running = clock.phases
    assert ended["phase"] == "a child that ends" and ended["cpu_s"] >= 0.35
    if running["cpu_scope"] == "tree":  # Linux: /proc is read
        assert running["cpu_s"] >= 0.35
    assert ended["wall_s"] >= ended["cpu_s"] * 0.5
    assert clock.totals()["cpu_s"] == round(ended["cpu_s"] + running["cpu_s"], 2)


def _child_cpu(pid: int) -> float:
    import os

    raw = open(f"/proc/{pid}/stat").read()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_report_shows_the_recorded_phases_and_nothing_without_them():
    phases = [{"phase": "induce (GEPA)", "wall_s": 120.0, "cpu_s": 200.5, "cpu_scope": "tree"},
              {"phase": "report", "wall_s": 2.0, "cpu_s": 1.5, "cpu_scope": "process"}]
    lines = phases_section({"meta": {"phases": phases, "phases_total": {"wall_s": 122.0, "cpu_s": 202.0}}})
    assert "| induce (GEPA) | 120.0 | 200.5 |" in lines
    assert "| report | 2.0 | 1.5 (this process only) |" in lines and "| **all** | **122.0** | **202.0** |" in lines
    assert phases_section({"meta": {}}) == []


def test_the_embedded_demo_skips_the_ablation_and_the_report_says_why():
    """The ablation is about 40% of the embedded demo's CPU (run.json's phases) for near-chance verdicts: the
    embedded preset skips it, a server preset runs it, and the report says which and why."""
    from rubricforge_dspy.core.presets import EMBEDDED, SERVER
    from rubricforge_dspy.pipeline.demo import protocol_config
    from rubricforge_dspy.report.markdown_comparisons import ablation_section

    assert protocol_config(EMBEDDED).ablation is False and protocol_config(SERVER).ablation is True
    assert protocol_config(EMBEDDED, ablation=True).ablation is True  # asked for: run
    skipped = "\n".join(ablation_section({"ablation": None, "meta": {"config": {"ablation": False}}}))
    assert "not run" in skipped and "--preset server" in skipped
    assert "no `ablation/` directory" in "\n".join(ablation_section({"ablation": None, "meta": {}}))
