"""Plugins register through the format registry: a distribution on ``sys.path`` with an entry point of group
``rubricforge_dspy.formats`` (found by importlib.metadata, as an installed package is) is listed by `formats`
with its origin, detected and read by the loaders; both forms (a `Format` record, an object with
``sniff(path)``) work; a broken plugin is skipped with one `PluginWarning` naming it, and naming its format is a
`PluginError` (tests/data/test_plugin_containment.py: raising, exiting and hanging plugins)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.formats import (
    detect_format,
    format_named,
    formats,
    load_plugins,
    load_trajectories,
    unregister_format,
)
from rubricforge_dspy.data.formats.plugins import PluginError, PluginWarning

MODULE = '''
import json
from pathlib import Path

from rubricforge_dspy.core.trajectory import FULL_REWARD, Source, Step, Trajectory, TrajectoryFormatError
from rubricforge_dspy.data.formats import Format, register_format


def _read(path, rule):
    for index, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        try:
            row = json.loads(line)
            yield index, Trajectory(id=f"{row['kind']}:{index}", task_id=row["q"], domain="qa", agent="demo",
                                    steps=(Step("user", row["q"]), Step("final_answer", row["a"])),
                                    reward=row["r"], label=None if rule is None else rule.label(row["r"]),
                                    source=Source(str(path), index))
        except (ValueError, KeyError) as exc:
            yield index, TrajectoryFormatError(str(path), index, f"not a demo record: {exc}")


def _is(kind):
    def sniff(head):
        return head.startswith('{"kind": "%s"' % kind)
    return sniff


# the preferred form: a Format record, sniffing a FileSample
RECORD = Format(name="demo_record", read=_read, sniff=lambda sample: _is("record")(sample.head),
                label_rule=FULL_REWARD, extensions=(".demo",), priority=150)


class Ducked:  # the other form: sniff(path)
    name = "demo_duck"
    label_rule = FULL_REWARD
    extensions = (".duck",)

    def sniff(self, path):
        return _is("duck")(Path(path).read_text(encoding="utf-8"))

    def read(self, path, rule=None):
        return _read(path, rule)


DUCK = Ducked()


class Raising(Ducked):
    name = "demo_raising"

    def sniff(self, path):
        raise RuntimeError("cannot sniff")


RAISING = Raising()

# a module that registers its format itself on import (as a format of one's own is registered) and is a plugin
SELF = register_format(Format(name="demo_self", read=_read, sniff=None, label_rule=FULL_REWARD))
'''


def _distribution(root, name, entries: dict, module: str | None = MODULE):
    """A distribution importlib.metadata finds on `root` (a ``.dist-info`` folder), with its module."""
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    lines = "".join(f"{key} = {value}\n" for key, value in entries.items())
    (info / "entry_points.txt").write_text(f"[rubricforge_dspy.formats]\n{lines}", encoding="utf-8")
    if module is not None:
        (root / "rf_demo_plugin.py").write_text(textwrap.dedent(module), encoding="utf-8")


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """Put a folder on sys.path for the test; afterwards the plugin formats it brought are unregistered and
    the registry's plugin state is what discovery without it gives."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = {fmt.name for fmt in formats()}
    yield root
    monkeypatch.undo()
    sys.modules.pop("rf_demo_plugin", None)
    from rubricforge_dspy.data.formats import _registry
    for name in [name for name in _registry._FORMATS if name not in before]:
        unregister_format(name)
    load_plugins()  # forgets the plugins skipped: the environment without the folder has none


def _write(path, kind, rows):
    path.write_text("\n".join(json.dumps({"kind": kind, **row}) for row in rows), encoding="utf-8")
    return path


ROWS = [{"q": "2+2?", "a": "4", "r": 1.0}, {"q": "capital of France?", "a": "Lyon", "r": 0.0}]


def test_plugins_of_both_forms_are_listed_detected_and_read(on_path, tmp_path):
    _distribution(on_path, "rf-demo-plugin", {"demo_record": "rf_demo_plugin:RECORD",
                                              "demo_duck": "rf_demo_plugin:DUCK", "demo_self": "rf_demo_plugin:SELF"})
    added = load_plugins()
    assert sorted(fmt.name for fmt in added) == ["demo_duck", "demo_record", "demo_self"]
    assert load_plugins() == ()  # discovered once: asking again registers nothing twice
    origins = {fmt.name: fmt.origin for fmt in formats()}
    assert origins["demo_record"] == origins["demo_duck"] == origins["demo_self"] == "plugin (rf-demo-plugin 0.1)"
    assert origins["tau_bench"] == "built-in"
    assert format_named("demo_duck").priority == 200 and format_named("demo_record").priority == 150

    data = tmp_path / "data"
    data.mkdir()
    record_file = _write(data / "a.demo", "record", ROWS)
    duck_file = _write(data / "b.duck", "duck", ROWS)
    assert detect_format(record_file) == "demo_record" and detect_format(duck_file) == "demo_duck"
    by_name = load_trajectories(duck_file, format="demo_duck")
    assert [(t.id, t.label, t.hidden["label_rule"]) for t in by_name] == [("duck:0", 1, "reward >= 1"),
                                                                         ("duck:1", 0, "reward >= 1")]
    scanned = load_trajectories(data)  # a folder: both files opened (their suffixes), each detected
    assert sorted(t.id for t in scanned) == ["duck:0", "duck:1", "record:0", "record:1"]
    assert [t.label for t in scanned if t.id.endswith(":1")] == [0, 0]  # FULL_REWARD: reward 0 fails
    assert scanned.report.label_rules == {"demo_record": "reward >= 1", "demo_duck": "reward >= 1"}


def test_a_broken_plugin_is_skipped_with_a_warning_and_naming_it_is_an_error(on_path, tmp_path):
    _distribution(on_path, "rf-broken-plugin", {"ghost": "rf_no_such_module:FORMAT"}, module=None)
    with pytest.warns(PluginWarning, match=r"entry point 'ghost' = 'rf_no_such_module:FORMAT'.*package "
                                           r"rf-broken-plugin 0.1\).*cannot be loaded"):
        assert load_plugins() == ()
    assert format_named("jsonl") is not None and "tau_bench" in [fmt.name for fmt in formats()]
    with pytest.raises(PluginError, match="format 'ghost' cannot be used.*rf-broken-plugin"):
        format_named("ghost")
    with pytest.raises(PluginError, match="rf-broken-plugin"):
        load_trajectories(tmp_path, format="ghost")


def test_a_plugin_named_as_a_shipped_format_is_refused(on_path):
    module = MODULE.replace('name="demo_record"', 'name="tau_bench"')
    _distribution(on_path, "rf-clash-plugin", {"clash": "rf_demo_plugin:RECORD"}, module=module)
    with pytest.warns(PluginWarning, match=r"entry point 'clash'.*rf-clash-plugin 0.1.*'tau_bench' is registered "
                                           r"already \(built-in"):
        load_plugins()
    assert format_named("tau_bench").origin == "built-in"


def test_a_sniffer_that_raises_is_skipped_naming_the_plugin(on_path, tmp_path):
    _distribution(on_path, "rf-raising-plugin", {"raising": "rf_demo_plugin:RAISING"})
    load_plugins()
    unknown = tmp_path / "x.json"
    unknown.write_text('{"neither": "format"}', encoding="utf-8")
    with pytest.warns(PluginWarning, match=r"entry point 'raising'.*sniff\(.*x\.json\) raised RuntimeError"):
        with pytest.raises(TrajectoryFormatError, match="unknown trajectory format"):
            detect_format(unknown)
    assert format_named("jsonl") is not None
    with pytest.raises(PluginError, match="format 'demo_raising' cannot be used.*entry point 'raising'"):
        format_named("demo_raising")
