"""Reading and validating what the report is computed from: a run directory, or verdict files.

The layout is documented in docs/REPORT.md. In short, :func:`load_run` accepts

- a run directory ``RUN/`` (``run.json`` + ``predictions/<judge>.jsonl`` [+ ``ablation/``,
  ``attribution.jsonl``]), its ``predictions/`` folder or its ``run.json``;
- one verdict file (``rubricforge judge --out``) or several, one per judge; the judge's name is
  the file's stem, and without a ``run.json`` the first file is the judge the others are compared
  with (``induced``, reported as the *reference* judge: nothing says it was induced, unless it is
  named ``induced``), and the judge LM is the ``model`` its lines record.

Every predictions line is validated against the verdict line schema
(:func:`rubricforge_dspy.core.verdict.read_lines`). The report also needs each item's ``label``
(optional in the schema): a verdict file of unlabeled data is joined with a labels file
(``labels``: JSONL of ``{"id", "label"[, "reward"]}``). ``task_id``, ``domain``, ``agent`` and
``n_steps`` may be absent (a user's own predictions cannot know them): ``task_id`` defaults to the
id, ``domain`` / ``agent`` to ``"unknown"``, and without ``n_steps`` the length strata are skipped;
each default is stated in the report's warnings. Items are aligned by sorted id.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.trajectory import ANY_POSITIVE_REWARD, LabelRule, parse_label_rule
from rubricforge_dspy.data.labels import LabelFileError, read_label_file
from rubricforge_dspy.report.extras import load_ablations, load_attribution, rubric_from
from rubricforge_dspy.report.records import (
    CATEGORICAL,
    Ablation,
    Items,
    LineFields,
    Predictions,
    RunError,
    VerdictColumns,
    collapse_whitespace,
    id_list,
    read_columns,
    read_json,
    relative,
)

__all__ = ["RunError", "Items", "Predictions", "Ablation", "Run", "load_run", "read_labels", "ITEM_DEFAULTS",
           "decided_run"]

ITEM_DEFAULTS = {"domain": "unknown", "agent": "unknown"}
_ITEM_FIELDS = ("task_id", "domain", "agent", "n_steps", "label", "reward")


@dataclass
class Run:
    """A loaded, validated run (see the module docstring)."""

    run_dir: Path
    meta: dict[str, Any]
    items: Items
    judges: tuple[str, ...]
    induced: str
    graded: bool
    predictions: dict[str, Predictions]
    ablations: tuple[Ablation, ...] = ()
    attribution: dict[str, Any] | None = None
    rubric: str | None = None
    sweep: list[dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)
    reference_kind: str = "induced"  # "reference": the first of plain verdict files, not known to be induced
    lines_lm: str | None = None  # the judge models the compared-with judge's verdict lines record


def read_labels(path: PathArg, label_threshold: float | str | LabelRule | None = None) -> dict[str, dict[str, Any]]:
    """``{id: {"label": 0|1, "reward": float}}`` from a label file read by
    `rubricforge_dspy.data.labels.read_label_file` (CSV, JSONL or SWE-bench results; docs/FORMAT.md). A
    reward without a label is labeled by ``label_threshold`` (a number T: reward > T, ``">=T"``),
    default reward > 0; a label without a reward takes the label as reward."""
    try:
        file = read_label_file(path)
    except LabelFileError as error:
        raise RunError(str(error)) from None
    rule = ANY_POSITIVE_REWARD if label_threshold is None else parse_label_rule(label_threshold)
    out: dict[str, dict[str, Any]] = {}
    for rid, entry in file.entries.items():
        label, reward = entry.resolve(rule)
        out[rid] = {"label": label, "reward": float(label) if reward is None else reward}
    if not out:
        raise RunError(f"{path}: no labels")
    return out


def _relabel(columns: VerdictColumns, rule: LabelRule) -> None:
    """Each line's label made again from its ``reward`` by `rule` (``--label-threshold`` without ``--labels``);
    refuse a file whose lines do not all carry a reward, naming the first and counting them."""
    missing = np.flatnonzero(np.isnan(columns.reward))
    if len(missing):
        first = int(missing[0])
        raise RunError(f"{columns.path}:{columns.line[first]}: --label-threshold {rule} needs --labels FILE or a "
                       f"'reward' on every verdict line: id {columns.ids[first]!r} has none ({len(missing)} of "
                       f"{len(columns)} lines without a reward)")
    columns.label[:] = [rule.label(reward) for reward in columns.reward]


def _join_labels(columns: VerdictColumns, labels: dict[str, dict[str, Any]] | None) -> None:
    """Fill each line's label / reward from ``labels`` (a line not in it keeps its own label); refuse
    lines left without a label, counting them. A reward left absent is the label."""
    if labels is not None:
        for ident, entry in labels.items():
            k = columns.row.get(ident)
            if k is not None:
                columns.label[k], columns.reward[k] = entry["label"], entry["reward"]
    missing = np.flatnonzero(columns.label < 0)
    if not len(missing):
        no_reward = np.isnan(columns.reward)
        columns.reward[no_reward] = columns.label[no_reward]
        return
    path, first, n = columns.path, int(missing[0]), len(columns)
    if labels is not None:
        raise RunError(f"{path}: {len(missing)} of {n} judged ids have no label: id {columns.ids[first]!r} has no "
                       "label in the labels file (nor in the verdict line); label every judged item")
    raise RunError(f"{path}:{columns.line[first]}: report needs labels: id {columns.ids[first]!r} has no 'label' "
                   f"(0 or 1); {len(missing)} of {n} verdicts are unlabeled. Judge labeled data, or join the labels "
                   "with --labels FILE (CSV id,label / JSONL {\"id\": ..., \"label\": 0|1} / SWE-bench results.json)")


def _items_from(reference: VerdictColumns, notes: list[str], source: str) -> tuple[Items, np.ndarray]:
    """The items in sorted-id order, and the reference file's row of each."""
    ids = reference.ids
    order = np.array(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.int64)
    for key, default in (("task_id", None), *ITEM_DEFAULTS.items()):
        missing = int((reference.codes[key] < 0).sum())
        if missing:
            what = "its id (each item its own task)" if key == "task_id" else repr(default)
            notes.append(f"{source}: {missing} item(s) without '{key}'; defaulted to {what}")
    with_steps = int((reference.n_steps >= 0).sum())
    if 0 < with_steps < len(ids):
        notes.append(f"{source}: only {with_steps} of {len(ids)} items carry 'n_steps'; length strata skipped")
    elif not with_steps:
        notes.append(f"{source}: no 'n_steps'; length strata skipped")
    sorted_ids = tuple(ids[k] for k in order)
    task = reference.strings("task_id", order)
    absent = np.flatnonzero(reference.codes["task_id"][order] < 0)
    if len(absent):
        task[absent] = np.asarray(sorted_ids, dtype=object)[absent]

    def with_default(field: str) -> tuple[str, ...]:
        values = reference.strings(field, order)
        values[reference.codes[field][order] < 0] = ITEM_DEFAULTS[field]
        return tuple(values.tolist())

    items = Items(ids=sorted_ids, task_id=tuple(task.tolist()), domain=with_default("domain"),
                  agent=with_default("agent"),
                  n_steps=reference.n_steps[order].copy() if with_steps == len(ids) else None,
                  label=reference.label[order].astype(np.int64), reward=reference.reward[order].copy())
    return items, order


def _first_difference(columns: VerdictColumns, rows: np.ndarray, reference: VerdictColumns,
                      ref_rows: np.ndarray) -> tuple[int, str, Any, Any] | None:
    """The first item (in item order, then field order) whose field differs between two files, where
    both carry the field: ``(item, field, value here, value in reference)``."""
    found: list[tuple[int, int, str, Any, Any]] = []
    for rank, key in enumerate(_ITEM_FIELDS):
        if key in CATEGORICAL:
            a, b = columns.codes[key][rows], reference.codes[key][ref_rows]
            both = (a >= 0) & (b >= 0)
            va, vb = columns.strings(key, rows), reference.strings(key, ref_rows)
            differ = both & (va != vb)
        else:
            va, vb = getattr(columns, key)[rows], getattr(reference, key)[ref_rows]
            both = (va >= 0) & (vb >= 0) if key == "n_steps" else np.ones(len(rows), dtype=bool)
            differ = both & ~(va == vb)
        hits = np.flatnonzero(differ)
        if len(hits):
            found.append((int(hits[0]), rank, key, va[hits[0]], vb[hits[0]]))
    if not found:
        return None
    k, _, key, a, b = min(found, key=lambda f: f[:2])
    casts: dict[str, Callable[[Any], Any]] = {"n_steps": int, "label": int, "reward": float}
    cast = casts.get(key, lambda v: v)
    return k, key, cast(a), cast(b)


def align(judge: str, columns: VerdictColumns, reference: VerdictColumns, items: Items,
          ref_rows: np.ndarray) -> Predictions:
    """One judge's verdicts as :class:`Predictions` aligned to ``items`` (the reference file's rows
    ``ref_rows``); refuses other ids or item fields."""
    path, ref_path = columns.path, reference.path
    missing = sorted(reference.row.keys() - columns.row.keys())
    extra = sorted(columns.row.keys() - reference.row.keys())
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} id(s) present in {ref_path.name}: {id_list(missing)}")
        if extra:
            parts.append(f"{len(extra)} extra id(s) not in {ref_path.name}: {id_list(extra)}")
        raise RunError(f"{path}: ids do not match {ref_path}; " + "; ".join(parts))
    rows = ref_rows if columns is reference else np.fromiter(
        (columns.row[i] for i in items.ids), dtype=np.int64, count=len(items))
    difference = _first_difference(columns, rows, reference, ref_rows)
    if difference is not None:
        k, key, a, b = difference
        raise RunError(f"{path}: id {items.ids[k]!r} has {key}={a!r} but {ref_path.name} has {b!r}; "
                       "all judges must be scored on the same items")
    calibrated = columns.score_calibrated[rows]
    lines = columns.line[rows]
    return Predictions(
        judge=judge, path=path, passed=columns.passed[rows], score=columns.score[rows],
        abstained=columns.abstained[rows], contradiction=columns.contradiction[rows],
        score_calibrated=None if np.isnan(calibrated).any() else calibrated,
        reason=LineFields(path, lines, items.ids, "reason", collapse_whitespace),
        error=LineFields(path, lines, items.ids, "error"),
        escalated=None if columns.escalated is None else columns.escalated[rows],
        evidence=None if columns.evidence is None else columns.evidence[rows],
    )


def _sources(inputs: Sequence[str | Path]) -> tuple[Path, dict[str, Any], list[tuple[str, Path]], list[str]]:
    """(root, run.json meta, [(judge, file)], notes) for a run directory or verdict files."""
    paths = [Path(p) for p in inputs]
    if not paths:
        raise RunError("no predictions given: pass a run directory or one verdict file per judge")
    if len(paths) == 1 and not paths[0].is_file() or (len(paths) == 1 and paths[0].name == "run.json"):
        run_dir = paths[0].parent if paths[0].name == "run.json" else paths[0]
        if run_dir.name == "predictions" and not (run_dir / "run.json").exists() \
                and (run_dir.parent / "run.json").exists():
            run_dir = run_dir.parent
        if not run_dir.is_dir():
            raise RunError(f"{run_dir}: neither a verdict file nor a run directory (see docs/REPORT.md)")
        return run_dir, *_run_dir_judges(run_dir)
    for p in paths:
        if not p.is_file():
            raise RunError(f"{p}: verdict file not found (pass a run directory alone, or verdict files)")
    stems = [p.stem for p in paths]
    if len(set(stems)) != len(stems):
        raise RunError(f"two verdict files share a judge name (file stem): {', '.join(map(str, paths))}")
    notes = ["no run.json: judge names are the file stems; " + (
        f"'{stems[0]}' (the first file) is the judge the others are compared with" if len(stems) > 1
        else "a single judge")]
    return paths[0].parent, {}, list(zip(stems, paths, strict=True)), notes


def _run_dir_judges(run_dir: Path) -> tuple[dict[str, Any], list[tuple[str, Path]], list[str]]:
    meta_path = run_dir / "run.json"
    meta = read_json(meta_path) if meta_path.exists() else {}
    if not isinstance(meta, dict):
        raise RunError(f"{meta_path}: expected a JSON object")
    notes = [] if meta_path.exists() else [f"{run_dir}: no run.json; judges are predictions/*.jsonl by name"]
    pdir = run_dir / "predictions"
    judges = meta.get("judges")
    if judges is None:
        judges = [p.stem for p in sorted(pdir.glob("*.jsonl"))]
        if not judges:
            raise RunError(f"{pdir}: no predictions/<judge>.jsonl files and no 'judges' in run.json "
                           "(see docs/REPORT.md for the run-directory layout)")
    if not (isinstance(judges, list) and judges and all(isinstance(j, str) and j for j in judges)):
        raise RunError(f"{meta_path}: 'judges' must be a non-empty list of judge names")
    if len(set(judges)) != len(judges):
        raise RunError(f"{meta_path}: 'judges' lists a judge twice: {judges}")
    absent = [j for j in judges if not (pdir / f"{j}.jsonl").is_file()]
    if absent:
        raise RunError(f"{pdir}: missing prediction file(s) " + ", ".join(f"{j}.jsonl" for j in absent)
                       + " for judges listed in run.json")
    unlisted = sorted(p.name for p in pdir.glob("*.jsonl") if p.stem not in judges)
    if unlisted:
        notes.append(f"predictions/: file(s) not listed in run.json 'judges' ignored: {', '.join(unlisted)}")
    return meta, [(j, pdir / f"{j}.jsonl") for j in judges], notes


def load_run(inputs: str | Path | Sequence[str | Path], labels: str | Path | None = None,
             label_threshold: float | str | LabelRule | None = None) -> Run:
    """Load and validate a run directory or verdict file(s) (see the module docstring); raises
    :class:`RunError` naming the file, line and what to do.

    `labels`: a label file joined by id (its rewards labeled by `label_threshold`, default reward > 0). Without
    `labels`, `label_threshold` labels every verdict line again from its ``reward`` (a line without one is
    refused: `RunError`)."""
    inputs = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    root, meta, files, notes = _sources(inputs)
    judges = [j for j, _ in files]
    induced = meta.get("induced", "induced" if "induced" in judges or meta else judges[0])
    if induced not in judges:
        raise RunError(f"{root / 'run.json'}: induced judge {induced!r} is not in judges {judges}")
    reference_kind = "induced" if meta or induced == "induced" else "reference"
    label_map = read_labels(labels, label_threshold) if labels is not None else None
    relabel = parse_label_rule(label_threshold) if labels is None and label_threshold is not None else None
    loaded = {}
    for judge, path in files:
        columns = read_columns(path)
        if relabel is not None:
            _relabel(columns, relabel)
        _join_labels(columns, label_map)
        loaded[judge] = columns
    if label_map is not None:
        unused = sorted(i for i in label_map if not any(i in c.row for c in loaded.values()))
        if unused:
            notes.append(f"labels {labels}: {len(unused)} label id(s) match no verdict (e.g. "
                         f"{', '.join(unused[:3])}); not used")
    reference = loaded[judges[0]]
    items, ref_rows = _items_from(reference, notes, relative(reference.path, root))
    predictions = {j: align(j, c, reference, items, ref_rows) for j, c in loaded.items()}

    graded = meta.get("graded")
    if graded is None:
        graded = bool(np.any((items.reward != 0.0) & (items.reward != 1.0)))
    elif not isinstance(graded, bool):
        raise RunError(f"{root / 'run.json'}: 'graded' must be true/false, got {graded!r}")
    rubric = rubric_from(meta, root, notes)
    ablations = load_ablations(root, items, rubric, notes,
                               lambda judge, path: align(judge, read_columns(path), reference, items, ref_rows))
    attribution = load_attribution(root, items, notes)
    sweep = meta.get("sweep")
    if sweep is not None and not (isinstance(sweep, list) and all(isinstance(r, dict) for r in sweep)):
        raise RunError(f"{root / 'run.json'}: 'sweep' must be a list of row objects")
    return Run(run_dir=root, meta=meta, items=items, judges=tuple(judges), induced=induced, graded=graded,
               predictions=predictions, ablations=ablations, attribution=attribution, rubric=rubric,
               sweep=sweep or None, warnings=notes, reference_kind=reference_kind,
               lines_lm=", ".join(loaded[induced].models) or None)


def _take(predictions: Predictions, keep: np.ndarray, ids: tuple[str, ...]) -> Predictions:
    """`predictions` at the rows `keep` (its free-text fields read back from the same lines)."""
    reason, error = predictions.reason, predictions.error
    return replace(
        predictions, passed=predictions.passed[keep], score=predictions.score[keep],
        abstained=predictions.abstained[keep], contradiction=predictions.contradiction[keep],
        score_calibrated=None if predictions.score_calibrated is None else predictions.score_calibrated[keep],
        reason=(LineFields(reason.path, reason.lines[keep], ids, "reason", collapse_whitespace)
                if isinstance(reason, LineFields) else [reason[int(k)] for k in np.flatnonzero(keep)]),
        error=(LineFields(error.path, error.lines[keep], ids, "error") if isinstance(error, LineFields)
               else [error[int(k)] for k in np.flatnonzero(keep)]),
        escalated=None if predictions.escalated is None else predictions.escalated[keep],
        evidence=None if predictions.evidence is None else predictions.evidence[keep])


def decided_run(run: Run) -> tuple[Run, int]:
    """The run without the items a cascade escalated to a person, and how many were left out.

    An escalated line is an abstention of kind ``"escalated"``: no stage was sure, a person decides. It is
    neither a pass nor a fail, so the metrics, confusion counts and figures are computed on the items every
    judge decided (the judges stay paired on the same items); the report counts the escalated apart (its
    cascade section) and says so in its warnings. A run without escalations is returned as is."""
    escalated = np.zeros(len(run.items), dtype=bool)
    for judged in run.predictions.values():
        if judged.escalated is not None:
            escalated |= judged.escalated
    left_out = int(escalated.sum())
    if not left_out:
        return run, 0
    keep = ~escalated
    if not keep.any():
        raise RunError(f"{run.run_dir}: every one of the {len(run.items)} item(s) was escalated to a person by the "
                       "cascade: there is no verdict to measure (label the escalated queue, or report the cascade's "
                       "section alone)")
    it = run.items
    pick = np.flatnonzero(keep)
    ids = tuple(it.ids[k] for k in pick)
    items = Items(ids=ids, task_id=tuple(it.task_id[k] for k in pick), domain=tuple(it.domain[k] for k in pick),
                  agent=tuple(it.agent[k] for k in pick), n_steps=None if it.n_steps is None else it.n_steps[keep],
                  label=it.label[keep], reward=it.reward[keep])
    predictions = {judge: _take(p, keep, ids) for judge, p in run.predictions.items()}
    ablations = tuple(replace(a, predictions=_take(a.predictions, keep, ids)) for a in run.ablations)
    notes = [*run.warnings, f"{left_out} of {len(it)} item(s) were escalated to a person by the cascade (no stage "
                            "was sure): neither passes nor fails, they are left out of the metrics, confusion "
                            f"counts and figures, which are on the {len(ids)} decided item(s)"]
    return replace(run, items=items, predictions=predictions, ablations=ablations, warnings=notes), left_out
