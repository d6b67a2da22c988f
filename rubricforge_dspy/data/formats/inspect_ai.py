"""Inspect AI eval logs (format ``inspect``): ``.json`` EvalLog files and ``.eval`` zip archives.

* ``.json``: one object ``{"version", "status", "eval": {"task", "model", ...}, "samples": [...], ...}``,
  streamed: a first pass keeps the members but ``samples`` (`scan_json_object`), a second reads one sample
  at a time (`stream_json_array`); a file ijson could read differently from `json` is read whole, as before.
* ``.eval``: a zip with ``header.json`` (the same object without samples) and ``samples/*.json``, one
  file per sample and epoch; samples are read one at a time. Members are Deflate (inspect_ai before
  0.3.285 and the shipped fixtures) or Zstandard (compression type 93, what inspect_ai writes since): a
  member the running ``zipfile`` reads (Deflate and Stored; Zstandard on Python 3.14, or where Inspect's
  own ``zipfile_zstd`` patch is loaded, e.g. inside an Inspect process) is read by it, a Zstandard member
  otherwise by the ``zstandard`` package (a runtime dependency), its size and CRC-32 checked. Any other
  compression is a `TrajectoryFormatError` naming the file and the member (exit 2), never a traceback.

One trajectory per sample and epoch, id ``{file name}/{eval.task}:{sample.id}:{epoch}`` (the file name
keeps two runs of one task apart: a log directory holds many), task id ``str(sample.id)``, trial = the
epoch. Steps come from ``sample["messages"]`` (``attachment://`` references resolved from the sample's
``attachments``): system messages are hidden; user -> ``user``; assistant -> its text (if any) then
one ``tool_call`` per ``tool_calls`` entry; tool -> ``tool_result`` (``error`` not null, or the text reads as
a failure (`looks_like_tool_error`) -> ``is_error``).
The last assistant text becomes the final answer.

Reward: the first scorer of ``sample["scores"]``: a number as is; ``"C"`` 1, ``"P"`` 0.5, ``"I"``/``"N"`` 0
(Inspect's ``value_to_float``); no score or any other value -> unlabeled (``label=None, reward=None``;
labels then come from ``--labels``). Hidden: scores, target, metadata, store, the system
prompt, the model usage.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from rubricforge_dspy.data.formats._format import Format, ReadResults
from rubricforge_dspy.data.formats._json_stream import Malformed, scan_json_object, stream_json_array, worth_streaming
from rubricforge_dspy.data.formats._steps import (
    CallTracker,
    error,
    finalize_answer,
    object_at,
    parse_arguments,
    text_of,
)
from rubricforge_dspy.data.formats._tool_errors import looks_like_tool_error

NAME = "inspect"
LABEL_RULE = FULL_REWARD  # "C" (correct) is 1; a partial "P" (0.5) is not a success by default
_LETTER_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}  # inspect_ai.scorer.value_to_float defaults
_ATTACHMENT = "attachment://"  # Inspect condenses long/binary content into sample["attachments"][hash]


ZIP_ZSTANDARD = 93  # APPNOTE 4.4.5: Zstandard; zipfile.ZIP_ZSTANDARD from Python 3.14
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # a zip member's local file header (APPNOTE 4.3.7), 30 bytes


class ZipMemberError(InputError):
    """A zip member this reader cannot decompress or whose bytes do not check out."""


def _zstd_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A Zstandard member's bytes, decompressed with ``zstandard`` (its size and CRC-32 checked)."""
    import zstandard

    if info.flag_bits & 0x1:
        raise ZipMemberError("the member is encrypted")
    fp = archive.fp
    if fp is None:
        raise ZipMemberError("the archive is closed")
    fp.seek(info.header_offset)
    header = fp.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise ZipMemberError("no local file header where the central directory says the member starts")
    name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
    fp.seek(info.header_offset + _LOCAL_HEADER.size + name_length + extra_length)
    raw = fp.read(info.compress_size)
    chunks, size = [], 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as reader:
            while size <= info.file_size:  # never more than the recorded size (+1 to see a mismatch)
                chunk = reader.read(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except zstandard.ZstdError as exc:
        raise ZipMemberError(f"corrupt Zstandard data: {exc}") from None
    data = b"".join(chunks)
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise ZipMemberError(f"Zstandard data does not match the recorded size/CRC ({len(data)} bytes, "
                             f"expected {info.file_size})")
    return data


def read_member(archive: zipfile.ZipFile, name: str) -> bytes:
    """The bytes of member `name` of a ``.eval`` zip, Deflate, Stored or Zstandard.

    Raises:
        ZipMemberError: another compression (named with its type number), an encrypted member, or
            bytes that do not decompress to the recorded size and CRC.
    """
    info = archive.getinfo(name)
    try:
        return archive.read(info)  # Deflate/Stored; Zstandard where zipfile knows it (3.14, Inspect's patch)
    except NotImplementedError:
        if info.compress_type != ZIP_ZSTANDARD:
            raise ZipMemberError(f"compression type {info.compress_type} is not supported (Inspect writes Deflate "
                                 "or Zstandard); convert the log with `inspect log convert --to json`") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise ZipMemberError(f"corrupt member: {exc}") from None
    return _zstd_member(archive, info)


def resolve_attachments(value: Any, attachments: dict) -> Any:
    """``value`` with every ``attachment://<hash>`` string replaced by the sample's attachment (unknown kept)."""
    if isinstance(value, str):
        return attachments.get(value[len(_ATTACHMENT):], value) if value.startswith(_ATTACHMENT) else value
    if isinstance(value, list):
        return [resolve_attachments(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: resolve_attachments(v, attachments) for k, v in value.items()}
    return value


def score_reward(scores: Any) -> float | None:
    """The first scorer's value as a float, or None when there is none or it is not a known value."""
    if not isinstance(scores, dict) or not scores:
        return None
    first = next(iter(scores.values()))
    value = first.get("value") if isinstance(first, dict) else first
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        if value.strip().upper() in _LETTER_VALUES:
            return _LETTER_VALUES[value.strip().upper()]
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _steps(messages: Any) -> tuple[list[Step], list[str]]:
    if not isinstance(messages, list):
        raise ValueError("'messages' must be a list")
    steps: list[Step] = []
    system: list[str] = []
    calls = CallTracker()
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        role = msg.get("role")
        text = text_of(msg.get("content"))
        if role == "system":
            system.append(text)
        elif role == "user":
            steps.append(Step(kind="user", content=text))
        elif role == "assistant":
            if text.strip():
                steps.append(Step(kind="assistant", content=text))
            for call in msg.get("tool_calls") or []:
                if not isinstance(call, dict):
                    raise ValueError(f"message {i}: a tool call is not an object")
                name = str(call.get("function") or "")
                steps.append(Step(kind="tool_call", tool_name=name, call_id=calls.call(call.get("id"), name),
                                  arguments=parse_arguments(call.get("arguments"))))
        elif role == "tool":
            call_id, called = calls.result(msg.get("tool_call_id"))
            err = msg.get("error")
            if err and not text.strip() and isinstance(err, dict):
                text = f"Error: {err.get('message') or err.get('type')}"
            steps.append(Step(kind="tool_result", content=text, tool_name=called or msg.get("function"),
                              call_id=call_id, is_error=err is not None or looks_like_tool_error(text)))
        else:
            raise ValueError(f"message {i} has unknown role {role!r}; expected system, user, assistant or tool")
    return finalize_answer(steps), system


def to_trajectory(sample: dict, header: dict, path: Path, index: int,
                  threshold: LabelRule | float | None) -> Trajectory:
    """One Inspect sample as a `Trajectory` (`threshold`: the label rule, None for reward > 0);
    ValueError naming the problem when it cannot be."""
    if not isinstance(sample, dict) or "id" not in sample:
        raise ValueError("a sample must be an object with an 'id'")
    ev = object_at(header, "eval")
    epoch = sample.get("epoch", 1)
    attachments = object_at(sample, "attachments")
    steps, system = _steps(resolve_attachments(sample.get("messages"), attachments))
    reward = score_reward(sample.get("scores"))
    output = object_at(sample, "output")
    hidden = {
        "format": NAME, "scores": sample.get("scores"), "target": sample.get("target"),
        "metadata": sample.get("metadata"), "store": sample.get("store"), "system_prompt": "\n\n".join(system) or None,
        "usage": output.get("usage"), "model_usage": sample.get("model_usage"), "sample_error": sample.get("error"),
    }
    return Trajectory(
        id=f"{path.name}/{ev.get('task') or 'task'}:{sample['id']}:{epoch}", task_id=str(sample["id"]),
        domain=str(ev.get("task") or "unknown"), agent=str(ev.get("model") or "unknown"), steps=tuple(steps),
        reward=reward, label=None if reward is None else label_from_reward(reward, threshold),
        source=Source(str(path), index), trial=epoch if isinstance(epoch, int) else None, hidden=hidden,
    )


def _samples(path: Path) -> Iterator[tuple[int | str | None, Any, dict]]:
    """``(index, sample | error, header)``: samples of a zip ``.eval`` read one at a time, else of a JSON log.
    A sample comes with its position (an int); an error with the sample's position, its member name in the
    zip, or None (the file as a whole)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "header.json" not in names:
                yield None, error(path, None, "not an Inspect .eval log (no header.json in the zip)"), {}
                return
            try:
                header = json.loads(read_member(archive, "header.json"))
            except ZipMemberError as exc:
                yield None, error(path, "header.json", f"member header.json: {exc}"), {}
                return
            except ValueError as exc:
                yield None, error(path, "header.json", f"malformed header.json: {exc}"), {}
                return
            members = sorted(n for n in names if n.startswith("samples/") and n.endswith(".json"))
            for index, name in enumerate(members):
                try:
                    yield index, json.loads(read_member(archive, name)), header
                except ZipMemberError as exc:
                    yield index, error(path, name, f"member {name}: {exc}"), header
                except ValueError as exc:
                    yield index, error(path, name, f"malformed sample JSON: {exc}"), header
        return
    header = scan_json_object(path, "samples", keep=("eval",), strip_bom=True) if worth_streaming(path) else None
    if header is None:  # small, ijson could read it differently from `json`, or no log: read whole, as before
        try:
            log = _whole_log(path.read_text(encoding="utf-8-sig"))
        except UnicodeDecodeError as exc:
            yield None, error(path, None, f"malformed JSON: {exc}"), {}
            return
        except Malformed as exc:
            yield None, error(path, None, exc.problem), {}
            return
        for index, sample in enumerate(log["samples"]):
            yield index, sample, log
        return
    try:  # streamed: memory holds the header (`eval`, `plan`, `results`, `stats`...) and one sample
        for index, sample, bad_bytes in stream_json_array(path, prefix="samples.item", strip_bom=True,
                                                          whole=_whole_samples):
            yield index, error(path, index, "invalid UTF-8 bytes in record") if bad_bytes else sample, header
    except Malformed as exc:  # only when the file changed between the two passes
        yield exc.index, error(path, exc.index, exc.problem), header


def _whole_log(text: str) -> dict:
    """The log object of a whole ``.json`` text; `Malformed` (index None) naming what is wrong."""
    try:
        log = json.loads(text)
    except ValueError as exc:
        raise Malformed(None, f"malformed JSON: {exc}") from None
    if not isinstance(log, dict) or not isinstance(log.get("samples"), list):
        raise Malformed(None, "not an Inspect eval log (expected an object with 'eval' and a 'samples' list)")
    return log


def _whole_samples(text: str) -> Iterator[tuple[int, Any]]:
    """`stream_json_array`'s fallback: the samples of the whole text."""
    return enumerate(_whole_log(text)["samples"])


def read(path: Path, threshold: LabelRule | float) -> ReadResults:
    """Yield ``(sample index, Trajectory | TrajectoryFormatError)``."""
    for index, sample, header in _samples(path):
        if isinstance(sample, TrajectoryFormatError):
            yield index, sample
            continue
        assert isinstance(index, int)  # `_samples`: only an error comes without a position
        try:
            yield index, to_trajectory(sample, header, path, index, threshold)
        except (ValueError, TypeError, AttributeError) as exc:
            yield index, error(path, index, str(exc))


def sniff(head: str, path: Path) -> bool:
    """True for an Inspect JSON log (top-level ``"eval"`` and ``"samples"``) or a zip ``.eval`` with ``header.json``."""
    if path.suffix == ".eval" and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return "header.json" in archive.namelist()
    if not head.startswith("{"):
        return False
    return bool(re.search(r'"eval"\s*:\s*\{', head) and re.search(r'"task"\s*:', head)
                and re.search(r'"(?:samples|status)"\s*:', head))


FORMAT = Format(
    name=NAME, read=read, label_rule=LABEL_RULE, priority=100, binary_extensions=(".eval",),
    description="an Inspect AI log (zip with header.json)", sniff=lambda sample: sniff(sample.head, sample.path))
