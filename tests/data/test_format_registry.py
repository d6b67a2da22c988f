"""The format registry: a format of one's own is registered through the same call as the built-ins and is
then found by name, by content sniffing and by a directory scan, counted like any other; the built-in
tables (names, label rules, scanned suffixes) are derived from the registry; a duplicate name is refused."""

from pathlib import Path

import pytest

from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.trajectory import (
    FULL_REWARD,
    LabelRule,
    Source,
    Step,
    Trajectory,
    TrajectoryFormatError,
    label_from_reward,
)
from rubricforge_dspy.data import formats as formats_package
from rubricforge_dspy.data.formats import (
    FORMATS,
    Format,
    LoadReport,
    default_label_rule,
    detect_format,
    formats,
    iter_trajectory_counts,
    load_trajectories,
    register_format,
    tau_bench,
    unregister_format,
)

HEADER = "#toy-log v1"


def read_toy(path: Path, rule: LabelRule):
    """The toy format: a header line, then one ``task|reward|question|answer`` line per episode."""
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    for index, line in enumerate(lines):
        fields = line.split("|")
        if len(fields) != 4:
            yield index, TrajectoryFormatError(str(path), index, f"expected 4 '|'-separated fields, got {len(fields)}")
            continue
        task, reward, question, answer = fields
        yield index, Trajectory(
            id=f"{path.stem}:{task}", task_id=task, domain="toy", agent="toy-agent",
            steps=(Step("user", question), Step("final_answer", answer)), reward=float(reward),
            label=label_from_reward(float(reward), rule), source=Source(str(path), index), hidden={"format": "toy"})


TOY = Format(name="toy", read=read_toy, label_rule=FULL_REWARD, extensions=(".toy",), description="a toy log",
             sniff=lambda sample: sample.head.startswith(HEADER))


@pytest.fixture
def toy():
    register_format(TOY)
    try:
        yield TOY
    finally:
        unregister_format("toy")


def write_toy(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def test_a_registered_format_is_loaded_by_name_by_sniffing_and_in_a_directory_scan(toy, tmp_path):
    data = tmp_path / "runs"
    data.mkdir()
    write_toy(data / "a.toy", ["t1|1.0|What is 2+2?|4", "t2|0.5|Capital of France?|Lyon"])
    (data / "notes.txt").write_text("not data\n", encoding="utf-8")

    assert "toy" in formats_package.FORMATS and toy in formats()
    assert detect_format(data / "a.toy") == "toy"
    assert default_label_rule("toy") == FULL_REWARD

    by_name = load_trajectories(data / "a.toy", format="toy")
    scanned = load_trajectories(data)
    for loaded in (by_name, scanned):
        assert [t.id for t in loaded] == ["a:t1", "a:t2"]
        assert [t.label for t in loaded] == [1, 0]  # the format's own rule: reward 1 is a success, 0.5 is not
        assert [s.kind for s in loaded[0].steps] == ["user", "final_answer"]
        assert loaded.report.label_rules == {"toy": str(FULL_REWARD)}
    assert scanned.report.ignored_files == [(str(data / "notes.txt"), "not a .json/.jsonl/.eval/.traj/.toy file")]


def test_a_registered_format_reports_bad_records_and_is_counted(toy, tmp_path):
    path = write_toy(tmp_path / "b.toy", ["t1|1.0|q|a", "broken line", "t3|0.0|q|a"])
    with pytest.raises(TrajectoryFormatError, match=r"b\.toy, record 1: expected 4"):
        load_trajectories(path)
    skipped = load_trajectories(path, on_error="skip")
    assert [t.id for t in skipped] == ["b:t1", "b:t3"]
    assert skipped.report.skipped == [(str(path), 1, "expected 4 '|'-separated fields, got 1")]
    report = LoadReport()
    counts = list(iter_trajectory_counts(path, on_error="skip", report=report))
    assert [(c.id, c.n_steps, c.label) for c in counts] == [("b:t1", 2, 1), ("b:t3", 2, 0)]
    assert report.loaded == 2 and report.n_skipped == 1


def test_a_counts_reader_without_hidden_is_counted_and_stamped_with_its_rule(tmp_path):
    """A format's own `count` reader may yield `TrajectoryCounts` with the default ``hidden=None``: the load
    loop stamps the label rule into a fresh dict (it raised TypeError on ``{**None}``)."""
    from rubricforge_dspy.data.formats import TrajectoryCounts

    def count_toy(path: Path, rule: LabelRule):
        for index, trajectory in read_toy(path, rule):
            yield index, TrajectoryCounts(id=trajectory.id, task_id=trajectory.task_id, domain="toy",
                                          agent="toy-agent", reward=trajectory.reward, label=trajectory.label,
                                          source=trajectory.source, n_steps=len(trajectory.steps))

    register_format(Format(name="toy_counted", read=read_toy, count=count_toy, label_rule=FULL_REWARD,
                           extensions=(".toy",)))
    try:
        path = write_toy(tmp_path / "d.toy", ["t1|1.0|q|a", "t2|0.0|q|a"])
        counts = list(iter_trajectory_counts(path, format="toy_counted"))
    finally:
        unregister_format("toy_counted")
    assert [(c.id, c.label) for c in counts] == [("d:t1", 1), ("d:t2", 0)]
    assert [c.hidden for c in counts] == [{"label_rule": str(FULL_REWARD)}] * 2


def test_after_unregistering_the_format_is_unknown_again(tmp_path):
    path = write_toy(tmp_path / "c.toy", ["t1|1.0|q|a"])
    register_format(TOY)
    unregister_format("toy")
    assert "toy" not in formats_package.FORMATS
    with pytest.raises(TrajectoryFormatError, match="unknown trajectory format"):
        detect_format(path)
    with pytest.raises(InputError, match="unknown format 'toy'"):
        load_trajectories(path, format="toy")


def test_a_duplicate_name_is_refused_naming_both_readers(toy):
    with pytest.raises(InputError, match=r"a format named 'toy' is registered already .*read_toy.*choose another"):
        register_format(Format(name="toy", read=lambda path, rule: iter(())))
    with pytest.raises(InputError, match="'tau_bench' is registered already"):
        register_format(Format(name="tau_bench", read=read_toy))
    assert [fmt for fmt in formats() if fmt.name == "toy"] == [TOY]  # the first one stays


def test_a_bad_record_is_refused_when_declared():
    with pytest.raises(InputError, match="lower case"):
        Format(name="Toy Format", read=read_toy)
    with pytest.raises(InputError, match="'auto'"):
        Format(name="auto", read=read_toy)
    with pytest.raises(InputError, match="must start with '.'"):
        Format(name="toy2", read=read_toy, extensions=("toy",))
    with pytest.raises(InputError, match="read must be callable"):
        Format(name="toy3", read="read_toy")
    with pytest.raises(InputError, match="takes a Format record"):
        register_format(tau_bench)


def test_the_built_in_tables_are_derived_from_the_registry():
    assert FORMATS == ("tau_bench", "tau2", "webshop_react", "adapt", "jsonl", "otel", "langfuse", "inspect",
                       "mini_swe", "swe_agent", "openhands", "atif", "openai_agents")
    assert tuple(fmt.name for fmt in formats()) == FORMATS
    assert formats_package.NOT_CANDIDATE == "not a .json/.jsonl/.eval/.traj file"
    for fmt in formats():  # each built-in module declares its record once, at its bottom
        module = __import__(fmt.read.__module__, fromlist=["FORMAT"])
        assert module.FORMAT is fmt and module.NAME == fmt.name
        assert default_label_rule(fmt.name) == fmt.label_rule
