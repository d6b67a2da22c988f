"""Whole-document formats streamed (issue 20, item 1): a tau-bench results array or a JSON array of generic
records is read one record at a time (ijson), with the same trajectories and the same errors as the
whole-text reader it replaced (which still reads whatever ijson could read differently)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubricforge_dspy.core.trajectory import TrajectoryFormatError
from rubricforge_dspy.data.export import record_of
from rubricforge_dspy.data.formats import (
    _json_stream,
    detect_format,
    inspect_ai,
    iter_trajectories,
    jsonl,
    langfuse,
    load_trajectories,
    tau2,
    tau_bench,
)
from rubricforge_dspy.data.formats._json_stream import (
    Malformed,
    has_bad_bytes,
    iter_json_array,
    read_text,
    stream_json_array,
)

ROOT = Path(__file__).resolve().parents[2]
TAU_FILES = [ROOT / "evals/data/tau_bench_official/gpt-4o-airline.json",
             ROOT / "evals/data/tau_bench_grok" / ("tool-calling-grok-4-fast-reasoning-0.0_range_0--1_user-grok-4-fast-"
                                                 "reasoning-llm_1129144541.json")]

EDGE_DOCUMENTS = [
    b'[1.5, 1e5, -0, -0.0, 1E400, 5e-324, 1e-400]',
    b'["\\ud83d\\ude00", "x", "\\ud800", "\\udc00x"]',  # escaped emoji; lone surrogates
    b'["\\ud800\\u0041", 1]',  # a lone high surrogate before another escape: ijson would join the two
    b'[{"a": 1, "a": 2}, 0.1, 9223372036854775807, 12345678901234567890123]',
    b'[1, 2, "\xff", 3]', b'[NaN, 1]', b'[1] trailing', b'{"a": 1}', b'\xef\xbb\xbf[1, 2]',
    b'\xef\xbb\xbf\xef\xbb\xbf[1]',
    b'[1,]', b'[1, 2 3]', b'', b'  \n[1]', b'[]', b'[1, 2', b'[\n1,\n{"a": tru}]', b'\xa0[1]',
    b'[' + b','.join(json.dumps({"k": "\U0001F600" * i + "\\", "n": i}).encode() for i in range(30)) + b']',
    b'["' + b'\\ud83d\\ude00' * 40 + b'", "' + b'a' * 30 + b'\\ud83d\\u0041"]',
]


def _whole(path: Path, strip_bom: bool) -> list:
    """What the whole-text reader gives (the reader before streaming)."""
    text, bad = read_text(path)
    out = []
    try:
        for index, value in iter_json_array(text.lstrip("\ufeff") if strip_bom else text):
            out.append((index, value, bad and has_bad_bytes(value)))
    except Malformed as exc:
        out.append(("error", exc.index, exc.problem))
    return out


def _streamed(path: Path, strip_bom: bool) -> list:
    out = []
    try:
        out.extend(stream_json_array(path, strip_bom=strip_bom))
    except Malformed as exc:
        out.append(("error", exc.index, exc.problem))
    return out


@pytest.mark.parametrize("chunk", [1, 5, 13, 1 << 16])
def test_the_stream_gives_the_whole_text_readers_elements_and_errors(tmp_path, monkeypatch, chunk):
    """User sees: the same values (numbers, escaped emoji, lone surrogates, repeated keys) and the same
    error naming the same element, whatever the read size (escapes split between reads included)."""
    monkeypatch.setattr(_json_stream, "STREAM_CHUNK", chunk)
    for n, document in enumerate(EDGE_DOCUMENTS):
        path = tmp_path / f"doc{n}.json"
        path.write_bytes(document)
        for strip_bom in (False, True):
            assert repr(_streamed(path, strip_bom)) == repr(_whole(path, strip_bom)), document[:60]


@pytest.fixture(autouse=True)
def _stream_small_files(monkeypatch):
    """The test documents are small: stream them all the same (loaders read files below STREAM_FROM whole)."""
    monkeypatch.setattr(_json_stream, "STREAM_FROM", 0)


def _never_read_whole(monkeypatch):
    def refuse(path):
        raise AssertionError(f"{path} was read whole")
    monkeypatch.setattr(_json_stream, "read_text", refuse)


def _results(read, path: Path) -> list:
    return [(index, result if not isinstance(result, Exception) else ("error", result.file, result.record,
                                                                        result.problem))
            for index, result in read(path, tau_bench.LABEL_RULE)]


def _raw_tau_files() -> list[Path]:
    """The raw tau-bench logs of the `shared/` checkout beside the repo, when there is one (CI has it)."""
    raw = ROOT.parent / "shared" / "data" / "raw"
    found = []
    for path in sorted(raw.rglob("*.json")) if raw.is_dir() else []:
        try:
            if detect_format(path) == "tau_bench":
                found.append(path)
        except TrajectoryFormatError:
            continue
    return found


def test_shipped_tau_bench_results_stream_to_the_same_trajectories(monkeypatch):
    """User sees: the shipped tau-bench files (and the raw logs of `shared/` when present: 12 files, some
    with bad records) give the same trajectories and errors as before, and none is read whole."""
    whole = {}
    files = TAU_FILES + _raw_tau_files()
    with monkeypatch.context() as forced:  # every element through the whole-text reader: the old path
        forced.setattr(_json_stream.ijson, "items",
                       lambda *a, **k: (_ for _ in ()).throw(_json_stream.ijson.JSONError("off")))
        for path in files:
            whole[path] = _results(tau_bench.read, path)
    _never_read_whole(monkeypatch)
    for path in files:
        streamed = _results(tau_bench.read, path)
        assert streamed == whole[path] and len(streamed) >= 50


def _tau_document(tmp_path: Path, tail: bytes) -> Path:
    records = json.loads(TAU_FILES[0].read_text())[:6]
    records[3]["task_id"], records[3]["trial"] = records[1]["task_id"], records[1]["trial"]  # a repeated key
    records[4]["traj"] = "not a list"
    body = b",".join(json.dumps(r).encode() for r in records)
    path = tmp_path / "airline-results.json"
    path.write_bytes(b"[" + body + tail)
    return path


@pytest.mark.parametrize("tail", [b"]", b", {\"task_id\": 9, \"traj\": [}]", b", \"\xff\"]", b", NaN]"])
def test_bad_tau_bench_documents_give_the_same_errors_streamed(tmp_path, monkeypatch, tail):
    """User sees: a truncated or malformed results file, a record of invalid UTF-8 or NaN: the same records
    loaded and the same errors (file, record, problem) as the whole-text reader gave."""
    path = _tau_document(tmp_path, tail)
    with monkeypatch.context() as forced:
        forced.setattr(_json_stream.ijson, "items",
                       lambda *a, **k: (_ for _ in ()).throw(_json_stream.ijson.JSONError("off")))
        whole = _results(tau_bench.read, path)
    streamed = _results(tau_bench.read, path)
    assert streamed == whole
    ids = [r.id for _, r in streamed if not isinstance(r, tuple)]
    assert len(ids) == len(set(ids)) >= 4 and any("#" in i for i in ids)  # the repeated key got its suffix
    assert any(isinstance(r, tuple) and "traj" in r[3] for _, r in streamed)


def test_a_generic_json_array_streams_with_the_same_records_and_errors(tmp_path, monkeypatch):
    """User sees: a JSON array of generic records loads as before (a bad record named by its index, a
    malformed tail named), streamed."""
    records = [record_of(t) for t in load_trajectories(TAU_FILES[0])[:5]]
    records[2]["reward"] = "high"
    good = tmp_path / "array.json"
    good.write_text("\ufeff\n" + json.dumps(records))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(records)[:-1] + ", {\"id\": ]")
    for path in (good, broken):
        with monkeypatch.context() as forced:
            forced.setattr(_json_stream.ijson, "items",
                           lambda *a, **k: (_ for _ in ()).throw(_json_stream.ijson.JSONError("off")))
            whole = _results(jsonl.read, path)
        assert _results(jsonl.read, path) == whole
        loaded = load_trajectories(path, on_error="skip")
        assert len(loaded) == 4 and loaded.report.skipped[0][1] == 2
    _never_read_whole(monkeypatch)
    kept = [r["id"] for i, r in enumerate(records) if i != 2]
    assert [t.id for t in iter_trajectories(good, on_error="skip")] == kept


# ----------------------------------------------------------------------------- tau2-bench results

def _ijson_off(context) -> None:
    """Every ijson parse refused: the loaders read whole, as before streaming."""
    def refuse(*args, **kwargs):
        raise _json_stream.ijson.JSONError("off")
    context.setattr(_json_stream.ijson, "items", refuse)
    context.setattr(_json_stream.ijson, "parse", refuse)
    context.setattr(_json_stream.ijson, "basic_parse", refuse)


def _compare(monkeypatch, read, path: Path) -> list:
    """The loader's results streamed, asserted equal to its results read whole."""
    with monkeypatch.context() as forced:
        _ijson_off(forced)
        whole = _results(read, path)
    streamed = _results(read, path)
    assert repr(streamed) == repr(whole), path.read_bytes()[:200]
    return streamed


def _sim(i: int, task: str = "1", trial=None, **changes) -> dict:
    sim = {"id": f"sim{i}", "task_id": task, "trial": i if trial is None else trial, "termination_reason": "user_stop",
           "reward_info": {"reward": 1.0 if i % 2 else 0.0},
           "messages": [{"role": "system", "content": "policy"},
                        {"role": "assistant", "content": "Hi! \U0001F600 How can I help?"},
                        {"role": "user", "content": "Cancel ABC."},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": "k", "name": "cancel_reservation", "arguments": {"reservation_id": "ABC"}}]},
                        {"role": "tool", "id": "k", "content": "Error: Reservation ABC not found", "error": True},
                        {"role": "assistant", "content": f"It does not exist ({i})."}]}
    sim.update(changes)
    return sim


def _tau2_members(sims_json: bytes, before: bytes = b"", after: bytes = b"") -> bytes:
    info = json.dumps({"agent_info": {"llm": "m", "implementation": "llm_agent", "llm_args": {"api_key": "sk-x"}},
                       "environment_info": {"domain_name": "airline", "policy": "# Policy"}}).encode()
    tasks = json.dumps([{"id": "1", "user_scenario": {"instructions": "be the user"}},
                        {"id": "2", "evaluation_criteria": {"actions": []}}]).encode()
    return (b'{"timestamp": "now", ' + before + b'"info": ' + info + b', "simulations": ' + sims_json
            + b', "tasks": ' + tasks + after + b"}")


def _sims(*sims) -> bytes:
    return json.dumps(list(sims)).encode()


GOOD_SIMS = _sims(_sim(0), _sim(1, task="2"), _sim(2, task="2", trial=1), _sim(3, task="1", trial=0),
                  _sim(4, reward_info={"db": None}), "not a simulation", _sim(5, task=7, trial=None),
                  _sim(6, messages=[]))
TAU2_DOCUMENTS = [
    _tau2_members(GOOD_SIMS),  # repeated (task_id, trial) keys, bad records, tasks after the simulations
    _tau2_members(GOOD_SIMS, before=b'"info": 3, "x": {"y": [1, {"z": null}]}, '),  # a repeated member
    _tau2_members(_sims()), _tau2_members(b'{"a": 1}'), _tau2_members(b'null'),
    _tau2_members(GOOD_SIMS, after=b', "simulations": []'), _tau2_members(GOOD_SIMS, before=b'"a.b": 1, '),
    _tau2_members(GOOD_SIMS, before=b'"": 1, '),
    _tau2_members(GOOD_SIMS[:-1] + b', {"task_id": {"a": 1}, "trial": [0]}]'),
    _tau2_members(GOOD_SIMS[:-1] + b', {"task_id": "1", "trial": 1.0, "trial": 2}]'),
    _tau2_members(GOOD_SIMS[:-1] + b', {"id": broken}]'),  # malformed: the records before it, then the error
    _tau2_members(GOOD_SIMS, before=b'"bad": [1,, '),  # malformed before the simulations: one file error
    _tau2_members(GOOD_SIMS, after=b', "bad": tru'),  # ... and after them
    _tau2_members(GOOD_SIMS[:-1] + b', {"task_id": "\xff"}]'), _tau2_members(GOOD_SIMS[:-1] + b', NaN]'),
    _tau2_members(GOOD_SIMS[:-1] + b', {"task_id": "\\ud800\\u0041", "trial": 12345678901234567890123}]'),
    b"\xef\xbb\xbf" + _tau2_members(GOOD_SIMS), _tau2_members(GOOD_SIMS) + b" trailing", _tau2_members(GOOD_SIMS)[:-40],
    b'{"simulations": ' + GOOD_SIMS + b"}", b"[" + GOOD_SIMS + b"]", b"", b"{}",
]


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_tau2_documents_stream_to_the_same_trajectories_and_errors(tmp_path, monkeypatch, chunk):
    """User sees: a tau2 results file (repeated task/trial keys, bad records, malformed or truncated JSON,
    invalid UTF-8, NaN, a byte order mark, repeated or misplaced members) gives the same trajectories, ids
    and errors (file, record, problem) streamed as read whole, whatever the read size."""
    monkeypatch.setattr(_json_stream, "STREAM_CHUNK", chunk)
    (tmp_path / "mysub_2025-01-01").mkdir()
    for n, document in enumerate(TAU2_DOCUMENTS):
        path = tmp_path / "mysub_2025-01-01" / f"doc{n}.json"
        path.write_bytes(document)
        _compare(monkeypatch, tau2.read, path)
    first = _results(tau2.read, tmp_path / "mysub_2025-01-01" / "doc0.json")
    ids = [r.id for _, r in first if not isinstance(r, tuple)]
    assert ids == ["mysub_2025-01-01/doc0:1:0#0", "mysub_2025-01-01/doc0:2:1#1", "mysub_2025-01-01/doc0:2:1#2",
                   "mysub_2025-01-01/doc0:1:0#3", "mysub_2025-01-01/doc0:7:5"]
    assert [r[2] for _, r in first if isinstance(r, tuple)] == [4, 5, 7]


def test_a_good_tau2_file_is_never_read_whole(tmp_path, monkeypatch):
    """User sees: a well-formed tau2 file loads through the stream (tasks found after the simulations,
    credentials redacted) without the file being read whole."""
    path = tmp_path / "results.json"
    path.write_bytes(TAU2_DOCUMENTS[0])
    expected = _compare(monkeypatch, tau2.read, path)
    _never_read_whole(monkeypatch)
    assert _results(tau2.read, path) == expected
    loaded = load_trajectories(path, on_error="skip")
    assert len(loaded) == 5 and loaded.report.skipped and loaded[0].hidden["instruction"] == "be the user"
    assert loaded[0].hidden["agent_info"]["llm_args"]["api_key"] == "<redacted>"


def test_shared_tau2_results_stream_to_the_same_trajectories(monkeypatch):
    """User sees: the tau2 leaderboard files of the `shared/` checkout give the same trajectories streamed."""
    files = sorted((ROOT.parent / "shared" / "data" / "raw" / "tau2_leaderboard").rglob("*.json"))
    if not files:
        pytest.skip("no tau2 leaderboard files: ../shared/data/raw/tau2_leaderboard is absent on this machine")
    for path in files:
        if detect_format(path) == "tau2":
            assert len(_compare(monkeypatch, tau2.read, path)) >= 1


# ----------------------------------------------------------------------------- Inspect AI .json logs

INSPECT_FILES = sorted((ROOT / "evals/data/inspect").glob("*.json"))


def _inspect_document(tail: bytes = b"", head: bytes = b"") -> bytes:
    log = json.loads(INSPECT_FILES[0].read_text())
    samples = log.pop("samples")
    samples = samples + [dict(samples[0], id="second", epoch=2), {"no": "id"}, 7]
    body = json.dumps(log).encode()
    return head + body[:-1] + b', "samples": ' + json.dumps(samples).encode()[:-1] + tail + b', "after": [1]}'


INSPECT_DOCUMENTS = [
    _inspect_document(b"]"), _inspect_document(b"]", head=b"\xef\xbb\xbf"), _inspect_document(b"]", head=b" \n"),
    _inspect_document(b', {"id": broken}]'), _inspect_document(b', {"id": "\xff"}]'), _inspect_document(b", NaN]"),
    _inspect_document(b', {"id": "\\udc00", "epoch": 99999999999999999999999}]'),
    _inspect_document(b"]")[:-30], _inspect_document(b"]") + b" trailing",
    b'{"eval": {"task": "t"}, "samples": {"a": [{"id": 1, "messages": []}]}}', b'{"eval": {"task": "t"}, "a.b": 1}',
    b'{"eval": {"task": "t"}, "samples": [{"id": 1, "messages": []}], "samples": []}', b'{"eval": 1}', b"[]", b"",
    b'{"eval": {"task": "t", "model": "m"}, "samples": [], "eval": {"task": "u"}}',
]


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_inspect_logs_stream_to_the_same_trajectories_and_errors(tmp_path, monkeypatch, chunk):
    """User sees: an Inspect `.json` log (bad samples, malformed or truncated JSON, invalid UTF-8, NaN, a
    byte order mark, repeated or misplaced members) gives the same trajectories and errors streamed as
    read whole, whatever the read size."""
    monkeypatch.setattr(_json_stream, "STREAM_CHUNK", chunk)
    for n, document in enumerate(INSPECT_DOCUMENTS):
        path = tmp_path / f"log{n}.json"
        path.write_bytes(document)
        _compare(monkeypatch, inspect_ai.read, path)
    first = _results(inspect_ai.read, tmp_path / "log0.json")
    assert [r.trial for _, r in first if not isinstance(r, tuple)][-1] == 2
    assert [r[2] for _, r in first if isinstance(r, tuple)] == [len(first) - 2, len(first) - 1]


def test_shipped_inspect_logs_stream_and_are_never_read_whole(monkeypatch):
    """User sees: the shipped Inspect `.json` logs give the same trajectories as before (header fields such as
    the task and model included), streamed without reading the file whole."""
    expected = {path: _compare(monkeypatch, inspect_ai.read, path) for path in INSPECT_FILES}
    monkeypatch.setattr(inspect_ai.Path, "read_text", lambda *a, **k: (_ for _ in ()).throw(AssertionError("whole")))
    _never_read_whole(monkeypatch)
    for path in INSPECT_FILES:
        streamed = _results(inspect_ai.read, path)
        assert streamed == expected[path] and streamed and all(not isinstance(r, tuple) for _, r in streamed)
        assert all(r.agent != "unknown" and r.domain != "unknown" for _, r in streamed)


# ----------------------------------------------------------------------------- Langfuse trace exports

LANGFUSE_FILES = sorted((ROOT / "evals/data/langfuse").glob("*.json"))


def _langfuse_traces() -> list[bytes]:
    return [json.dumps(json.loads(path.read_text())).encode() for path in LANGFUSE_FILES]


def _langfuse_documents() -> list[bytes]:
    traces = _langfuse_traces()
    array = b"[" + b", ".join(traces + [b'{"trace": {"name": "no id"}, "observations": []}', b"7"]) + b"]"
    page = b'{"meta": {"page": 1}, "data": ' + array + b', "extra": {"a": [1]}}'
    return [array, page, b"\xef\xbb\xbf" + array, b"\xef\xbb\xbf" + page, array[:-1] + b", {\"id\": broken}]",
            array[:-1] + b', {"trace": "\xff"}]', array[:-1] + b", NaN]", page.replace(b'"meta"', b'"a.b"'),
            array[:-200], array + b" trailing", page + b" x", traces[0], b'{"data": {"a": 1}}', b"[]", b"", b"{}",
            b'{"data": [], "data": ' + array + b"}", array[:-1] + b', "\\ud83d\\u0041"]']


@pytest.mark.parametrize("chunk", [5, 64, 1 << 16])  # 300 KB documents: one-byte reads take seconds
def test_langfuse_exports_stream_to_the_same_trajectories_and_errors(tmp_path, monkeypatch, chunk):
    """User sees: a Langfuse export (an array of traces or a `data` page: bad traces, malformed or truncated
    JSON, invalid UTF-8, NaN, a byte order mark, one trace) gives the same trajectories and errors streamed
    as read whole, whatever the read size."""
    monkeypatch.setattr(_json_stream, "STREAM_CHUNK", chunk)
    for n, document in enumerate(_langfuse_documents()):
        path = tmp_path / f"export{n}.json"
        path.write_bytes(document)
        results = _compare(monkeypatch, langfuse.read, path)
        if n < 4:  # the array and the page: every shipped trace, then the two bad records
            assert [r.id for _, r in results[:-2]] == [json.loads(t)["trace"]["id"] for t in _langfuse_traces()]
            assert [r[2] for _, r in results[-2:]] == [len(results) - 2, len(results) - 1]


def test_langfuse_lists_are_never_read_whole(tmp_path, monkeypatch):
    """User sees: the shipped traces as an array or an API page load through the stream, not read whole."""
    documents = _langfuse_documents()[:2]
    expected = {}
    for n, document in enumerate(documents):
        path = tmp_path / f"export{n}.json"
        path.write_bytes(document)
        expected[path] = _compare(monkeypatch, langfuse.read, path)
    monkeypatch.setattr(langfuse.Path, "read_text", lambda *a, **k: (_ for _ in ()).throw(AssertionError("whole")))
    _never_read_whole(monkeypatch)
    for path, results in expected.items():
        assert _results(langfuse.read, path) == results and len(results) == len(LANGFUSE_FILES) + 2


def test_small_documents_are_read_whole_once_and_large_ones_streamed(tmp_path, monkeypatch):
    """User sees: the same trajectories from a small tau2 file read whole at once and from the same file
    streamed once it counts as large (STREAM_FROM)."""
    path = tmp_path / "results.json"
    path.write_bytes(TAU2_DOCUMENTS[0])
    monkeypatch.setattr(_json_stream, "STREAM_FROM", path.stat().st_size + 1)
    calls = []
    monkeypatch.setattr(tau2, "scan_json_object",
                        lambda *a, **k: calls.append(a) or _json_stream.scan_json_object(*a, **k))
    small = _results(tau2.read, path)
    assert calls == []
    monkeypatch.setattr(_json_stream, "STREAM_FROM", path.stat().st_size)
    assert _results(tau2.read, path) == small and len(calls) == 1 and len(small) == 8
