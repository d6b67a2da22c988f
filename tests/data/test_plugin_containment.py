"""A broken format plugin is named and contained. Plugins are real distributions (a ``.dist-info`` folder with
an ``entry_points.txt`` on the path, found by importlib.metadata as an installed package is). A plugin that
raises at import (``SystemExit(0)`` and a ``KeyboardInterrupt`` of its own included), hangs at import, or
raises or hangs in its sniffer is skipped with one warning naming its entry point and distribution, and the
built-in formats still read; ``--format jsonl`` never imports a plugin; a command that names the broken
plugin's format exits 2 naming its entry point; the user's own Ctrl-C still stops a command waiting on a hung
plugin. The hangs are bounded low (``RUBRICFORGE_PLUGIN_TIMEOUT``) and released when the test ends."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from rubricforge_dspy.data.formats import (
    _registry,
    detect_format,
    format_named,
    formats,
    iter_trajectory_counts,
    load_plugins,
    load_trajectories,
    unregister_format,
)
from rubricforge_dspy.data.formats.plugins import PLUGIN_TIMEOUT_ENV, PluginError, PluginWarning

ROOT = Path(__file__).resolve().parents[2]
DIST = "rf-broken"
RECORD = {"id": "a", "task_id": "t", "messages": [{"role": "user", "content": "hi"}], "reward": 1}

# A plugin module waits for the file "release" beside it (the fixture writes it when the test ends), at most
# `cap` seconds: a hang that ends, so that today's code (which waits for it) fails instead of hanging forever.
WAIT = '''
import time
from pathlib import Path

def wait_for_release(cap=30.0):
    release, start = Path(__file__).with_name("release"), time.monotonic()
    while not release.exists() and time.monotonic() - start < cap:
        time.sleep(0.02)
'''

IMPORT_BODIES = {
    "raises": 'raise RuntimeError("kaboom")',
    "exits 0": "raise SystemExit(0)",
    "exits 3": "raise SystemExit(3)",
    "hangs": "wait_for_release()\nraise RuntimeError('released')",
}
IMPORT_PROBLEMS = {"raises": "cannot be loaded: RuntimeError: kaboom",
                   "exits 0": "cannot be loaded: SystemExit: 0", "exits 3": "cannot be loaded: SystemExit: 3",
                   "hangs": "loading it did not finish within 0.5 s"}

SNIFFERS = '''
from rubricforge_dspy.data.formats import Format


def _read(path, rule):
    return iter(())


def _raise(value):
    raise ValueError("sniffer bug")


def _hang(value):
    wait_for_release()
    return False


# priority 1: asked before every built-in format, so each detection reaches them
RAISING = Format(name="bad_sniff", read=_read, sniff=_raise, priority=1)
HANGING = Format(name="slow_sniff", read=_read, sniff=_hang, priority=1)
RAISING_RECORD = Format(name="bad_record", read=_read, sniff_record=_raise, priority=1, extensions=(".jsonl",))
'''


def install(root: Path, module: str, body: str, entries: dict[str, str]) -> None:
    """A distribution `DIST` 0.1 on `root` declaring `entries` (name -> ``module:attr``) and the module."""
    info = root / "rf_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.1\n", encoding="utf-8")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[rubricforge_dspy.formats]\n{lines}", encoding="utf-8")
    marker = f"Path(__file__).with_name('imported-{module}').touch()\n"  # says the module was imported
    (root / f"{module}.py").write_text(textwrap.dedent(WAIT) + marker + textwrap.dedent(body) + "\n", encoding="utf-8")


def write_jsonl(path: Path, record_id: str = "a") -> Path:
    path.write_text(json.dumps({**RECORD, "id": record_id}) + "\n", encoding="utf-8")
    return path


def write_array(path: Path, record_id: str) -> Path:
    path.write_text(json.dumps([{**RECORD, "id": record_id}]), encoding="utf-8")
    return path


def skipped(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for the test's distribution; plugins are not discovered yet (the test discovers
    them, lazily), the bound is 0.5 s. Afterwards: hangs released, formats and skipped plugins forgotten."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, "0.5")
    monkeypatch.setitem(_registry._PLUGINS, "loaded", False)
    before = set(_registry._FORMATS)
    yield root
    (root / "release").touch()
    for thread in threading.enumerate():  # the abandoned calls finish once released
        if getattr(thread, _registry.ABANDONED, None):
            thread.join(30)
    monkeypatch.undo()
    for name in set(_registry._FORMATS) - before:
        unregister_format(name)
    for module in [name for name in sys.modules if name.startswith("rf_broken_")]:
        del sys.modules[module]
    load_plugins()  # the folder is gone: its skipped plugins are forgotten


@pytest.mark.parametrize("kind", IMPORT_BODIES)
def test_a_plugin_that_fails_at_import_is_skipped_once_naming_it_and_built_ins_still_read(site, tmp_path, kind):
    module = f"rf_broken_{kind.replace(' ', '_')}"
    install(site, module, IMPORT_BODIES[kind], {"boom": f"{module}:FORMAT"})
    data = write_jsonl(tmp_path / "d.jsonl")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_trajectories(data)  # auto-detection: plugins discovered
        assert [t.id for t in loaded] == ["a"]
        assert detect_format(data) == "jsonl" and "jsonl" in [fmt.name for fmt in formats()]
    [warning] = skipped(caught)  # one warning, however often the registry is asked afterwards
    assert f"entry point 'boom' = '{module}:FORMAT'" in warning and f"package {DIST} 0.1" in warning
    assert IMPORT_PROBLEMS[kind] in warning
    with pytest.raises(PluginError, match=rf"format 'boom' cannot be used.*entry point 'boom'.*{DIST} 0\.1"):
        load_trajectories(data, format="boom")


def test_a_hung_module_is_waited_for_once_and_cannot_register_a_format_when_it_finishes_late(site):
    body = ("wait_for_release()\nfrom rubricforge_dspy.data.formats import Format, register_format\n"
            "FORMAT = register_format(Format(name='late', read=lambda path, rule: iter(())))\nOTHER = FORMAT\n")
    install(site, "rf_broken_hang", body, {"slow": "rf_broken_hang:FORMAT", "slow_too": "rf_broken_hang:OTHER"})
    with pytest.warns(PluginWarning) as caught:
        names = [fmt.name for fmt in formats()]
    assert "jsonl" in names and "late" not in names
    first, second = skipped(caught)
    assert "entry point 'slow'" in first and "did not finish within 0.5 s" in first
    assert "entry point 'slow_too'" in second and "rf_broken_hang is still being imported" in second
    (site / "release").touch()
    for thread in threading.enumerate():
        if getattr(thread, _registry.ABANDONED, None):
            thread.join(30)
    assert format_named("late") is None  # the late import's register_format was refused


@pytest.mark.parametrize("entry, make, problem", [
    ("RAISING", write_array, r"sniff\(.*\) raised ValueError: sniffer bug"),
    ("HANGING", write_array, r"sniff\(.*\) did not finish within 0\.5 s"),
    ("RAISING_RECORD", write_jsonl, r"sniff_record\(.*\) raised ValueError"),
])
def test_a_sniffer_that_raises_or_hangs_is_skipped_once_and_the_files_are_read(site, tmp_path, entry, make, problem):
    install(site, "rf_broken_sniff", SNIFFERS, {"sniffy": f"rf_broken_sniff:{entry}"})
    folder = tmp_path / "data"
    folder.mkdir()
    make(folder / "a.json", "a")
    make(folder / "b.json", "b")
    with pytest.warns(PluginWarning) as caught:
        loaded = load_trajectories(folder)
    assert len(loaded) == 2 and set(loaded.report.label_rules) == {"jsonl"}
    [warning] = skipped(caught)
    assert "entry point 'sniffy'" in warning and f"package {DIST} 0.1" in warning
    assert re.search(problem, warning)
    name = {"RAISING": "bad_sniff", "HANGING": "slow_sniff", "RAISING_RECORD": "bad_record"}[entry]
    assert name not in [fmt.name for fmt in formats()]
    with pytest.raises(PluginError, match=rf"format '{name}' cannot be used.*entry point 'sniffy'"):
        format_named(name)


def test_a_named_built_in_format_never_imports_a_plugin(site, tmp_path):
    install(site, "rf_broken_never", IMPORT_BODIES["raises"], {"boom": "rf_broken_never:FORMAT"})
    data = write_jsonl(tmp_path / "d.jsonl")
    folder = tmp_path / "folder"
    folder.mkdir()
    write_jsonl(folder / "x.jsonl")
    (folder / "notes.txt").write_text("not data", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plugin's warning would fail the test
        assert [t.id for t in load_trajectories(data, format="jsonl")] == ["a"]
        scanned = load_trajectories(folder, format="jsonl")
        assert [t.id for t in scanned] == ["a"] and scanned.report.ignored_files[0][0].endswith("notes.txt")
        assert [c.id for c in iter_trajectory_counts([data], format="jsonl")] == ["a"]
    assert not (site / "imported-rf_broken_never").exists()


def run_cli(site: Path, *args: str, bound: str = "1", timeout: float = 120, **popen):
    env = {**os.environ, PLUGIN_TIMEOUT_ENV: bound,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(site), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "rubricforge_dspy.cli", *args]
    if popen:
        return subprocess.Popen(command, env=env, text=True, **popen)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=site.parent)


CLI_BODIES = {**IMPORT_BODIES, "raises KeyboardInterrupt": "raise KeyboardInterrupt"}


@pytest.mark.parametrize("kind", CLI_BODIES)
def test_commands_with_a_broken_plugin_installed(tmp_path, kind):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "rf_broken_cli", CLI_BODIES[kind], {"boom": "rf_broken_cli:FORMAT"})
    data = str(write_jsonl(tmp_path / "d.jsonl"))
    imported = site / "imported-rf_broken_cli"
    try:
        named = run_cli(site, "stats", "--data", data, "--format", "jsonl")  # never imports the plugin
        assert named.returncode == 0 and "trajectories: 1" in named.stdout, named.stderr
        assert "plugin" not in named.stderr and not imported.exists()

        auto = run_cli(site, "stats", "--data", data)  # detection: the plugin is skipped, once, named
        assert auto.returncode == 0 and "trajectories: 1" in auto.stdout, auto.stderr
        assert auto.stderr.count("format plugin skipped") == 1 and imported.exists()
        assert f"entry point 'boom' = 'rf_broken_cli:FORMAT' (group 'rubricforge_dspy.formats', package {DIST} 0.1)" \
               in auto.stderr

        for command in (["stats", "--data", data], ["judge", "--data", data, "--out", str(tmp_path / "v.jsonl")]):
            refused = run_cli(site, *command, "--format", "boom")  # names it: exit 2, the entry point named
            assert refused.returncode == 2, refused.stderr
            assert "format 'boom' cannot be used" in refused.stderr and f"package {DIST} 0.1" in refused.stderr
            assert "Traceback" not in refused.stderr and not (tmp_path / "v.jsonl").exists()
    finally:
        (site / "release").touch()


def test_the_users_ctrl_c_stops_a_command_waiting_on_a_hung_plugin(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "rf_broken_ctrl_c", "wait_for_release(120)", {"slow": "rf_broken_ctrl_c:FORMAT"})
    data = str(write_jsonl(tmp_path / "d.jsonl"))
    process = run_cli(site, "stats", "--data", data, bound="120", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (site / "imported-rf_broken_ctrl_c").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (site / "imported-rf_broken_ctrl_c").exists(), "the plugin was never imported"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)  # well before the plugin's bound (120 s) or its release
        assert process.returncode == 130 and stderr.strip().endswith("interrupted"), stderr
    finally:
        (site / "release").touch()
        if process.poll() is None:
            process.kill()
            process.wait()


TWO_HANGING = {
    "import": ("wait_for_release()\nraise RuntimeError('released')", "FORMAT"),
    "sniff": (SNIFFERS, "HANGING"),
}


@pytest.mark.parametrize("where", TWO_HANGING)
def test_two_hanging_plugins_cost_one_bound_not_two(site, tmp_path, monkeypatch, where):
    """Detection is bounded in total: the plugins' imports (and their sniffers) run side by side under one
    bound, so two plugins that hang cost about one bound, not one each (a bound check, not a speed target:
    the margin is half a bound)."""
    monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, "1")
    body, attr = TWO_HANGING[where]
    install(site, "rf_broken_one", body, {"one": f"rf_broken_one:{attr}"})
    (site / "rf_broken_two.py").write_text((site / "rf_broken_one.py").read_text(encoding="utf-8")
                                           .replace("imported-rf_broken_one", "imported-rf_broken_two"),
                                           encoding="utf-8")
    entries = site / "rf_broken-0.1.dist-info" / "entry_points.txt"
    if where == "sniff":
        (site / "rf_broken_two.py").write_text((site / "rf_broken_two.py").read_text(encoding="utf-8")
                                               .replace('"slow_sniff"', '"slow_sniff_two"'), encoding="utf-8")
    entries.write_text(entries.read_text(encoding="utf-8") + f"two = rf_broken_two:{attr}\n", encoding="utf-8")
    data = write_array(tmp_path / "d.json", "a")  # a document: the plugins' sniffers are asked first
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        assert detect_format(data) not in ("slow_sniff", "slow_sniff_two")
        took = time.monotonic() - start
    assert len(skipped(caught)) == 2 and all("did not finish" in s for s in skipped(caught)), skipped(caught)
    assert took < 1.5, f"two hanging plugins took {took:.2f} s with a 1 s bound: {skipped(caught)}"


NON_DAEMON = '''
import threading
from rubricforge_dspy.data.formats import Format


def _read(path, rule):
    return iter(())


def _never(value):
    return False


threading.Thread(target=wait_for_release, args=(600.0,), name="rf plugin worker", daemon=False).start()
FORMAT = Format(name="threaded", read=_read, sniff=_never, priority=1)
'''


def test_a_plugin_that_starts_a_non_daemon_thread_does_not_keep_the_command_alive(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "rf_broken_thread", NON_DAEMON, {"threaded": "rf_broken_thread:FORMAT"})
    data = str(write_jsonl(tmp_path / "d.jsonl"))
    try:
        done = run_cli(site, "stats", "--data", data, timeout=60)  # the thread waits 600 s for its release
        assert done.returncode == 0 and "trajectories: 1" in done.stdout, done.stderr
        assert "entry point 'threaded' = 'rf_broken_thread:FORMAT'" in done.stderr, done.stderr
        assert "rf plugin worker" in done.stderr and "still running" in done.stderr, done.stderr
    finally:
        (site / "release").touch()
