"""Frozen judge programs: JSON only, with a manifest that pins the rubric by its hash.

File layout (a superset of DSPy's own `Module.save` JSON, so `TrajectoryJudge().load(path)` works):

    {"judge": <Predict state, lm always null>,
     "metadata": {"dependency_versions": {...}},
     "rubricforge": {<manifest>}}

The LM endpoint is never stored: it is attached when the program is loaded.

Integrity: the manifest's ``program_sha256`` is the sha256 of a canonical form (`program_sha256`) of
everything the file holds that is sent to the LM or decides the verdict: the judge state
(instructions, every field's description and prefix, the demos) and the whole manifest (rubric,
render configuration, calibration, threshold, hybrid stack, certificate...), without the hash itself.
`read_program` verifies it; a program without one (manifest deleted, or frozen before it existed) or
whose content no longer matches is refused with a `ProgramError`, unless the caller passes
``allow_unverified=True`` (``--allow-unverified-program``), which warns `UnverifiedProgramWarning`.
The hash detects edits and corruption; it is not a signature (whoever can write the file can recompute
it). Program files larger than `MAX_PROGRAM_BYTES` are refused before they are read, and files whose arrays
or objects nest deeper than `MAX_STREAM_DEPTH` before they are parsed: hashing walks the parsed value
recursively, so a document nested ~1,000 deep would otherwise end in a RecursionError. `read_json_document`
is the one reader of every judge document the package parses and hashes (programs, hybrid programs,
cascades, floors).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import orjson

from rubricforge_dspy.core.errors import InputError, RubricForgeWarning
from rubricforge_dspy.core.files import PathArg, regular_file
from rubricforge_dspy.core.rubric import rubric_sha256
from rubricforge_dspy.core.trajectory import Trajectory, require_labels
from rubricforge_dspy.data.formats._json_stream import MAX_STREAM_DEPTH, within_depth
from rubricforge_dspy.evidence.render import RENDER_VERSION
from rubricforge_dspy.lm.fingerprint import package_version

if TYPE_CHECKING:
    import dspy

FORMAT_VERSION = 1
MANIFEST_KEY = "rubricforge"
CERTIFICATE_KEY = "certificate"  # the manifest key of the certificate (`trust.certificate`)
PROGRAM_SHA_KEY = "program_sha256"
MAX_PROGRAM_BYTES = 5 * 1024 * 1024  # a frozen judge is a few KB; anything this large is not one
OVERRIDE_HINT = "pass allow_unverified=True (command line: --allow-unverified-program) to load it anyway"


class ProgramError(InputError):
    """A frozen program file that cannot be trusted or read; the message names the file."""


class UnverifiedProgramWarning(RubricForgeWarning):
    """A program was loaded without a verifiable ``program_sha256`` because the caller allowed it."""


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def program_sha256(state: dict[str, Any]) -> str:
    """sha256 of a program's canonical content: its ``judge`` state (LM left out) and its manifest
    without ``program_sha256``. `state` is the parsed file (plain JSON values)."""
    judge = {k: v for k, v in (state.get("judge") or {}).items() if k != "lm"}
    manifest = {k: v for k, v in (state.get(MANIFEST_KEY) or {}).items() if k != PROGRAM_SHA_KEY}
    return hashlib.sha256(_canonical({"judge": judge, "manifest": manifest})).hexdigest()


def _seal(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as the file will hold it (an orjson round trip), its manifest stamped with `program_sha256`."""
    state = orjson.loads(orjson.dumps(state))
    state[MANIFEST_KEY] = {**state[MANIFEST_KEY], PROGRAM_SHA_KEY: program_sha256(state)}
    return state


def data_fingerprint(trajectories: Iterable[Trajectory]) -> str:
    """sha256 over the sorted (id, reward, label) triples: which labeled data a program saw."""
    rows = []
    for t in require_labels(trajectories, "the data fingerprint"):
        if t.label is None:  # require_labels refuses an unlabeled trajectory
            raise InputError(f"trajectory {t.id!r} has no label: the data fingerprint needs labeled data")
        rows.append((t.id, float(t.label if t.reward is None else t.reward), int(t.label)))
    rows.sort()
    return hashlib.sha256(json.dumps(rows).encode("utf-8")).hexdigest()


def data_ids(trajectories: Iterable[Trajectory]) -> dict[str, Any]:
    """The ids and tasks a program saw, recorded in its manifest so a certificate can refuse them."""
    items = list(trajectories)
    return {"ids": sorted({t.id for t in items}), "tasks": sorted({f"{t.domain}/{t.task_id}" for t in items})}


def build_manifest(judge: dspy.Module, *, lm: str | None = None, data_fingerprint: str | None = None,
                   metrics: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                   seen: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest recorded with a frozen judge. `seen` (see `data_ids`): the trajectories and tasks
    the program was trained and selected on."""
    signature = judge.judge.signature
    return {
        "format_version": FORMAT_VERSION,
        "rubric": judge.rubric,
        "rubric_sha256": rubric_sha256(judge.rubric),
        "signature": {
            "inputs": list(signature.input_fields),
            "outputs": list(signature.output_fields),
        },
        "render": {"max_tokens": judge.render_config.max_tokens,
                   "max_step_chars": judge.render_config.max_step_chars,
                   "version": RENDER_VERSION},
        "versions": {"rubricforge_dspy": package_version("rubricforge-dspy"), "dspy": package_version("dspy")},
        "induced_with_lm": lm,
        "data_fingerprint": data_fingerprint,
        **({"data_seen": seen} if seen is not None else {}),
        "created_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "metrics": metrics or {},
        **(extra or {}),
    }


def freeze(judge: dspy.Module, path: PathArg, **manifest_fields: Any) -> dict[str, Any]:
    """Attach a fresh manifest to `judge` and save it to `path` as a JSON program.

    Args:
        judge: a `TrajectoryJudge` (or a judge with its ``rubric``, ``judge.signature``,
            ``render_config`` and ``dump_state``); its ``manifest`` is replaced.
        path: the program file to write; it must end in ``.json`` (parent directories are created).
        **manifest_fields: passed to `build_manifest`: ``lm``, ``data_fingerprint``, ``metrics``,
            ``extra`` (merged at the top level of the manifest), ``seen``.

    Returns:
        The manifest written (rubric and its sha256, signature fields, render sizes, versions, ...).

    Raises:
        ProgramError: `path` is not a ``.json`` file.
    """
    manifest = build_manifest(judge, **manifest_fields)
    judge.manifest = manifest
    save_judge(judge, path)
    saved: dict[str, Any] = judge.manifest  # save_judge sets it to the sealed manifest
    return saved


def save_judge(judge: dspy.Module, path: PathArg) -> None:
    """Save `judge` as a JSON program at `path` with its manifest (rubric hash, program hash), never a pickle.

    Raises:
        ProgramError: `path` is not a ``.json`` file.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ProgramError(f"{path}: frozen programs are JSON files (.json)")
    manifest = judge.manifest or build_manifest(judge)
    if manifest.get("rubric_sha256") != rubric_sha256(judge.rubric):
        manifest = {**manifest, "rubric": judge.rubric, "rubric_sha256": rubric_sha256(judge.rubric)}
    judge.manifest = manifest
    state = judge.dump_state()
    state["judge"]["lm"] = None
    state["metadata"] = {"dependency_versions": {"dspy": package_version("dspy")}}
    state[MANIFEST_KEY] = manifest
    state = _seal(state)
    judge.manifest = state[MANIFEST_KEY]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))


def read_json_document(path: PathArg, what: str = "program") -> Any:
    """The parsed JSON of a judge document (a program, a cascade, a floor), once it is a regular file of at
    most `MAX_PROGRAM_BYTES` whose arrays and objects nest at most `MAX_STREAM_DEPTH` deep.

    Every check comes before the next step can hang or recurse: ``stat`` before anything opens the path (a
    FIFO), the size before it is read, the depth (on the bytes) before it is parsed and hashed.

    Args:
        path: the file.
        what: what the file is for the user ("program", "cascade", "floor"), used in the messages.

    Returns:
        The parsed value (any JSON value: the caller checks its shape).

    Raises:
        ProgramError: naming the file: too large, nested too deeply, unreadable, or not JSON.
        NotARegularFileError: the path is a FIFO, a socket, a device or a directory.
    """
    path = Path(path)
    try:
        size = regular_file(path, what).stat().st_size  # never opens a FIFO or a device
        if size > MAX_PROGRAM_BYTES:
            raise ProgramError(f"{path}: {size} bytes; a {what} file is at most {MAX_PROGRAM_BYTES} bytes "
                               "(a judge's rubric, fields and demos take a few KB): refusing to read it")
        data = path.read_bytes()
        if not within_depth(data):
            raise ProgramError(f"{path}: arrays or objects nested too deeply (more than {MAX_STREAM_DEPTH} levels; "
                               f"a {what} nests a few): refusing to read it. Is this a RubricForge {what}?")
        return orjson.loads(data)
    except (OSError, orjson.JSONDecodeError) as error:
        raise ProgramError(f"{path}: not a readable JSON {what} ({error})") from error


def _check_shape(path: Path, state: object) -> None:
    """Refuse, naming the file, a program whose structure is not a judge's (wrong types, missing parts)."""
    def bad(what: str) -> ProgramError:
        return ProgramError(f"{path}: malformed program: {what}; is this a RubricForge program?")

    if not isinstance(state, dict) or "judge" not in state:
        raise bad("no 'judge' state")
    judge = state["judge"]
    if not isinstance(judge, dict):
        raise bad(f"'judge' is {type(judge).__name__}, not an object")
    signature = judge.get("signature")
    if not isinstance(signature, dict):
        raise bad("'judge.signature' is missing or not an object")
    if not isinstance(signature.get("instructions"), str):
        raise bad("'judge.signature.instructions' is missing or not a string")
    fields = signature.get("fields")
    if not isinstance(fields, list) or not all(
            isinstance(f, dict) and isinstance(f.get("prefix"), str) and isinstance(f.get("description"), str)
            for f in fields):
        raise bad("'judge.signature.fields' must be a list of objects with string 'prefix' and 'description'")
    for key in ("demos", "train", "traces"):
        value = judge.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise bad(f"'judge.{key}' must be a list of objects")
    manifest = state.get(MANIFEST_KEY)
    if manifest is not None and not isinstance(manifest, dict):
        raise bad(f"'{MANIFEST_KEY}' is {type(manifest).__name__}, not an object")
    render = (manifest or {}).get("render")
    if render is not None and not (isinstance(render, dict) and all(
            isinstance(render.get(k), int) and not isinstance(render.get(k), bool)
            for k in ("max_tokens", "max_step_chars"))):
        raise bad("manifest 'render' must hold integer 'max_tokens' and 'max_step_chars'")
    for key in ("calibration", "threshold", "hybrid", CERTIFICATE_KEY):
        value = (manifest or {}).get(key)
        if value is not None and not isinstance(value, dict):
            raise bad(f"manifest '{key}' must be an object")


def read_program(path: PathArg, allow_unverified: bool = False) -> dict[str, Any]:
    """Parse and verify a frozen program file.

    Args:
        path: the program (``.json``, at most `MAX_PROGRAM_BYTES`).
        allow_unverified: load a program without a verifiable ``program_sha256`` (none recorded, or one
            its content no longer matches) with an `UnverifiedProgramWarning` instead of refusing it.

    Returns:
        The parsed file: ``{"judge": ..., "metadata": ..., "rubricforge": manifest or absent}``.

    Raises:
        ProgramError: naming the file: not JSON, too large, nested too deeply, malformed, or not verifiable.
        NotARegularFileError: the path is a FIFO, a socket or a device (`core.files.regular_file`).
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ProgramError(f"{path}: frozen programs are JSON files; refusing {path.suffix or 'no suffix'}")
    document = read_json_document(path, "program")
    _check_shape(path, document)
    state: dict[str, Any] = document  # _check_shape refused anything but a judge's object
    instructions = state["judge"]["signature"]["instructions"]
    manifest = state.get(MANIFEST_KEY)
    if manifest is not None:
        if manifest.get("rubric_sha256") != rubric_sha256(instructions or ""):
            raise ProgramError(f"{path}: rubric does not match the manifest's rubric_sha256; refusing to load")
        if manifest.get("rubric") != instructions:
            raise ProgramError(f"{path}: manifest rubric text differs from the program's instructions")
    recorded = (manifest or {}).get(PROGRAM_SHA_KEY)
    problem = None
    if manifest is None:
        problem = "has no RubricForge manifest, so nothing pins what it sends to the LM"
    elif recorded is None:
        problem = (f"has no '{PROGRAM_SHA_KEY}' in its manifest (frozen before programs were hashed whole), "
                   "so its field texts, demos and operating point cannot be verified")
    elif recorded != program_sha256(state):
        problem = (f"does not match its manifest's {PROGRAM_SHA_KEY}: its instructions, field texts, demos, "
                   "operating point, render configuration or manifest were changed after it was frozen")
    if problem is not None:
        if not allow_unverified:
            raise ProgramError(f"{path}: {problem}; refusing to load it. Re-freeze it from a trusted source, or "
                               f"{OVERRIDE_HINT}")
        warnings.warn(f"{path}: {problem}; loaded anyway because unverified programs were allowed",
                      UnverifiedProgramWarning, stacklevel=2)
    return state


# -- sealed judge documents: a judge saved in a format of its own (``"kind"``), its content pinned by ``"sha256"``

DOCUMENT_SHA_KEY = "sha256"
DOCUMENT_MANIFEST_KEY = "manifest"


def _document_digest(document: dict[str, Any]) -> str:
    body = {k: v for k, v in document.items() if k != DOCUMENT_SHA_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def is_judge_document(data: Any) -> bool:
    """Whether parsed JSON `data` is a sealed judge document (a ``"kind"``, a ``"sha256"``, no program's
    ``"judge"`` state): the segments and explorer judges' files (`write_judge_document`)."""
    return (isinstance(data, dict) and isinstance(data.get("kind"), str) and DOCUMENT_SHA_KEY in data
            and "judge" not in data)


def write_judge_document(document: dict[str, Any], path: PathArg) -> None:
    """Write a judge's own JSON document (its ``"kind"``, its state, its ``"manifest"``) with a ``"sha256"`` of
    the rest (never a pickle), atomically.

    Raises:
        ProgramError: `path` is not a ``.json`` file.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ProgramError(f"{path}: a judge is saved as a .json file")
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {k: v for k, v in document.items() if k != DOCUMENT_SHA_KEY}
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({**body, DOCUMENT_SHA_KEY: _document_digest(body)}, indent=2, ensure_ascii=False)
                         + "\n", encoding="utf-8")
    temporary.replace(path)


def read_judge_document(path: PathArg, kind: str | None = None) -> dict[str, Any]:
    """The verified JSON document of a judge at `path` (of `kind`, when given); `ProgramError` naming the file
    otherwise: unreadable, not a sealed judge document (or of another kind), or edited after it was saved."""
    data = read_json_document(Path(path), "program")
    found = data.get("kind") if isinstance(data, dict) else type(data).__name__
    if not is_judge_document(data) or (kind is not None and found != kind):
        raise ProgramError(f"{path}: not a {kind or 'sealed judge'} file (its 'kind' is {found!r})")
    document: dict[str, Any] = data
    if document.get(DOCUMENT_SHA_KEY) != _document_digest(document):
        raise ProgramError(f"{path}: its sha256 does not match its content: edited after it was saved")
    manifest = document.get(DOCUMENT_MANIFEST_KEY)
    if manifest is not None and not isinstance(manifest, dict):
        raise ProgramError(f"{path}: its '{DOCUMENT_MANIFEST_KEY}' is {type(manifest).__name__}, not an object")
    return document


def read_manifest(path: PathArg, allow_unverified: bool = False) -> dict[str, Any] | None:
    """The manifest of a saved judge, verified: a frozen program's (`read_program`) or a sealed judge
    document's ``"manifest"`` (`read_judge_document`: a segments or explorer judge); None when it has none.

    Raises:
        ProgramError: naming the file, as `read_program` or `read_judge_document`.
    """
    if Path(path).suffix == ".json" and is_judge_document(read_json_document(Path(path), "program")):
        document_manifest: dict[str, Any] | None = read_judge_document(path).get(DOCUMENT_MANIFEST_KEY)
        return document_manifest
    program_manifest: dict[str, Any] | None = read_program(path, allow_unverified=allow_unverified).get(MANIFEST_KEY)
    return program_manifest


def update_manifest(path: PathArg, fields: dict[str, Any], out_path: PathArg | None = None,
                    allow_unverified: bool = False) -> dict[str, Any]:
    """Set `fields` in the manifest of the program at `path` (verified first; see `read_program` for
    `allow_unverified`) and write it to `out_path` (default: in place, atomically) with a fresh
    ``program_sha256``; the program stays loadable. Returns the manifest.

    A sealed judge document (a segments or explorer judge, `read_judge_document`) is updated the same way: its
    ``"manifest"`` (created when it has none) gets `fields`, its ``"sha256"`` is recomputed."""
    path = Path(path)
    if path.suffix == ".json" and is_judge_document(read_json_document(path, "program")):
        document = read_judge_document(path)
        updated: dict[str, Any] = {**(document.get(DOCUMENT_MANIFEST_KEY) or {}), **fields}
        target = Path(out_path) if out_path is not None else path
        write_judge_document({**document, DOCUMENT_MANIFEST_KEY: orjson.loads(orjson.dumps(updated))}, target)
        written: dict[str, Any] = read_judge_document(target)[DOCUMENT_MANIFEST_KEY]
        return written
    state = read_program(path, allow_unverified=allow_unverified)
    if state.get(MANIFEST_KEY) is None:
        raise ProgramError(f"{path}: no RubricForge manifest to update; freeze the program first")
    state[MANIFEST_KEY] = {**state[MANIFEST_KEY], **fields}
    state = _seal(state)
    target = Path(out_path) if out_path is not None else path
    if target.suffix != ".json":
        raise ProgramError(f"{target}: frozen programs are JSON files (.json)")
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    temporary.replace(target)
    read_program(target)
    manifest: dict[str, Any] = state[MANIFEST_KEY]
    return manifest
