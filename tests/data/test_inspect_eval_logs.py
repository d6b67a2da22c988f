"""Inspect's current ``.eval`` logs: a log written in the test by the installed inspect_ai (Zstandard members,
compression type 93, since 0.3.285) loads in ``stats``, ``convert`` and as a ``cascade fit --stage
inspect:LOG:SCORER``. The commands run in a fresh process, as a user runs them: inspect_ai patches ``zipfile``
for Zstandard in its own process only, so an in-process run would not show what a user meets. A member with a
compression no reader knows is exit 2 naming the file and the member."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rubricforge_dspy.cli.main import main
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.formats.inspect_ai import ZIP_ZSTANDARD
from tests.support.helpers import REPO

N_SAMPLES = 20  # enough tasks for `cascade fit` to certify the recorded stage at alpha 0.2


def answer(messages, tools, tool_choice, config):
    """Inspect's mock model as a (fallible) agent: right on even samples, wrong on odd ones. (Usage set, so the
    mock model does not count tokens with tiktoken, which downloads its encoding.)"""
    from inspect_ai.model import ModelOutput, ModelUsage

    number = int(messages[-1].text.split()[-1].rstrip("?"))
    output = ModelOutput.from_content("mockllm/model", str(number if number % 2 == 0 else number + 1))
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return output


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory):
    """A ``.eval`` log the installed inspect_ai writes: N_SAMPLES samples scored by ``match``."""
    pytest.importorskip("inspect_ai", reason="writing an Inspect log needs inspect_ai: pip install -e '.[inspect]'")
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import match

    task = Task(dataset=[Sample(id=f"q{i}", input=f"Repeat the number {i}?", target=str(i))
                         for i in range(N_SAMPLES)], scorer=match())
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=answer),
                         log_dir=str(tmp_path_factory.mktemp("inspect-logs")), display="none")
    assert log.status == "success", log.error
    return Path(log.location).resolve()


def cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m rubricforge_dspy ARGS`` in a fresh process (no inspect_ai imported, zipfile unpatched)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "rubricforge_dspy", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_log_the_installed_inspect_writes_loads_in_stats_convert_and_a_cascade_stage(eval_log, tmp_path):
    with zipfile.ZipFile(eval_log) as archive:
        kinds = {info.filename: info.compress_type for info in archive.infolist()}
    if kinds["header.json"] != ZIP_ZSTANDARD:  # what the test is for; an older or future Inspect may differ
        pytest.skip(f"this inspect_ai writes compression {kinds['header.json']}, not Zstandard")
    stats = cli("stats", "--data", str(eval_log), "--json")
    assert stats.returncode == 0, stats.stderr
    counted = json.loads(stats.stdout)
    assert counted["trajectories"] == N_SAMPLES and counted["positives"] == N_SAMPLES // 2
    out = tmp_path / "converted.jsonl"
    converted = cli("convert", "--data", str(eval_log), "--out", str(out))
    assert converted.returncode == 0, converted.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == N_SAMPLES
    by_task = {line["task_id"]: line for line in lines}
    assert by_task["q3"]["label"] == 0 and by_task["q4"]["label"] == 1
    assert any("Repeat the number 4?" in json.dumps(step) for step in by_task["q4"]["messages"])
    cascade = tmp_path / "cascade.json"
    fitted = cli("cascade", "fit", "--stage", f"inspect:{eval_log}:match", "--data", str(eval_log),
                 "--alpha", "0.2", "--bound", "pooled", "--method", "holm",  # reading the log is tested, not power
                 "--out", str(cascade))
    assert fitted.returncode == 0, fitted.stderr
    assert "Traceback" not in fitted.stderr and cascade.exists()
    recorded = [json.loads(line) for line in (tmp_path / "cascade.recorded.verdicts.jsonl").read_text().splitlines()]
    assert sorted(v["passed"] for v in recorded) == [False] * (N_SAMPLES // 2) + [True] * (N_SAMPLES // 2)


@pytest.mark.slow
def test_zstandard_members_are_read_in_process_too(eval_log):
    """The package's own Zstandard path (not a zipfile patched by an inspect_ai import): same trajectories."""
    from rubricforge_dspy.data.formats.inspect_ai import _zstd_member

    with zipfile.ZipFile(eval_log) as archive:
        for info in archive.infolist():
            if info.compress_type == ZIP_ZSTANDARD:
                assert _zstd_member(archive, info) == archive.read(info)  # inspect_ai's patch is loaded here
    assert len(load_trajectories(eval_log)) == N_SAMPLES


def _recompress(source, target, member: str, compress_type: int) -> None:
    """`source` copied Stored, with `member`'s compression type set to `compress_type` in both its headers."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info))
    data = bytearray(target.read_bytes())
    with zipfile.ZipFile(target) as archive:
        info = archive.getinfo(member)
    start = 0
    while True:  # the central directory entry of `member`
        central = data.index(b"PK\x01\x02", start)
        name_length = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46:central + 46 + name_length].decode() == member:
            break
        start = central + 4
    struct.pack_into("<H", data, central + 10, compress_type)
    struct.pack_into("<H", data, info.header_offset + 8, compress_type)
    target.write_bytes(bytes(data))


def test_a_member_with_an_unknown_compression_is_exit_2_naming_the_file_and_member(tmp_path, capsys):
    shipped = REPO / "evals" / "data" / "inspect" / "log_read_sample.eval"
    with zipfile.ZipFile(shipped) as archive:
        sample = next(n for n in archive.namelist() if n.startswith("samples/"))
    broken = tmp_path / "odd.eval"
    _recompress(shipped, broken, sample, 97)  # 97: WavPack, which no reader here knows
    assert main(["stats", "--data", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "odd.eval" in err and sample in err and "compression type 97" in err and "Traceback" not in err
    header_broken = tmp_path / "odd_header.eval"
    _recompress(shipped, header_broken, "header.json", 97)
    assert main(["convert", "--data", str(header_broken), "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "odd_header.eval" in err and "header.json" in err and "compression type 97" in err
