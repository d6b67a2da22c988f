"""The evaluation report: every number recomputed from a persisted run directory.

Run-directory contract (``artifacts/RUN/``)
===========================================

``run.json`` (required), a JSON object:

    lm             judge LM name (str)
    reflection_lm  reflection LM name used for induction (str)
    dataset        dataset name (str)
    split          {"train": {...}, "val": {...}, "test": {...}} summaries (shown as a table)
    induced        name of the induced judge, e.g. "induced" (default "induced")
    judges         judge names in table order, e.g. ["oracle", "induced", "geval", "fewshot",
                   "heuristic", "majority"]; each needs ``predictions/<judge>.jsonl``. If absent,
                   every ``predictions/*.jsonl`` is used, in sorted order.
    graded         bool: rewards are graded (e.g. WebShop); if absent, inferred from the rewards
    notes          free text (optional)
    sweep          optional list of induction sweep rows (``induce.sweep_table``): candidate, parents,
                   val_score, val_agreement, discovered_at_metric_call, rubric_sha256, rubric_chars
    program        optional path of the frozen program (relative to the run dir or absolute)
    rubric         optional induced rubric text; if absent it is read from ``program``'s manifest.
                   Used to name ablated criteria and to attribute verdicts to criteria.

Other keys are ignored.

``predictions/<judge>.jsonl`` (required per judge): one JSON object per test item, keys

    id (str), task_id (str), domain (str), agent (str), n_steps (int >= 0),
    passed (bool), score (float in [0, 1]), reason (str or null), abstained (bool),
    error (str or null), label (0/1), reward (finite float)

Extra keys (``error_kind``, ``cached``, ``model``, ...) are ignored. Every judge file must hold
exactly the same ids, each once, and agree on the item fields (task_id, domain, agent, n_steps,
label, reward); otherwise :class:`RunError` names the file and the missing / extra / conflicting
ids. Lines may come in any order: items are aligned by sorted id, so the report does not depend
on completion order. An abstention is a *fail* verdict for every metric (``passed`` is taken as
``False`` whenever ``abstained`` is true) and is also counted per judge.

``ablation/<number>_<slug>.jsonl`` (optional, same line schema and ids): the induced judge re-run
with criterion ``<number>`` removed. ``ablation/criteria.json`` (optional) ``[{number, name}]``
names the criteria; without it the name comes from the rubric, else from the slug.

``attribution.jsonl`` (optional): ``{id, criterion}``, the criterion (number or name) the induced
judge says decided the item. Without it the criterion is attributed from the induced verdict's
``reason``: an explicit "criterion N", else the earliest full criterion name, else the criterion
whose name keywords match most; ``unattributed`` when nothing matches (or no rubric is known).

Outputs (:func:`write_report`): ``report.md``, ``report.json`` (every number, same stem as the
markdown) and ``figures/*.png`` next to the markdown.

Numbers are deterministic: items are aligned by sorted id, bootstraps use ``seed`` (default 0) with
``n_resamples`` (default 10^4) percentile resamples, and nothing time-dependent is rendered.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from rubricforge_dspy import metrics as M
from rubricforge_dspy.rubric import Criterion, parse_criteria

__all__ = [
    "RunError",
    "Items",
    "Predictions",
    "Ablation",
    "Run",
    "load_run",
    "compute_report",
    "render_markdown",
    "write_report",
    "report_main",
    "attribute_reason",
    "BASELINE",
]

BASELINE = "geval"  # the judge the false-pass gap and the disagreement cases compare against
REASON_CHARS = 160
FIGURES_DIR = "figures"
_ITEM_FIELDS = ("task_id", "domain", "agent", "n_steps", "label", "reward")
_REQUIRED = ("id", "task_id", "domain", "agent", "n_steps", "passed", "score", "reason", "abstained",
             "error", "label", "reward")


class RunError(ValueError):
    """A run directory that does not satisfy the contract; the message names the file."""


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Items:
    """The test items (ground truth and metadata), aligned by sorted id."""

    ids: tuple[str, ...]
    task_id: tuple[str, ...]
    domain: tuple[str, ...]
    agent: tuple[str, ...]
    n_steps: np.ndarray  # int64
    label: np.ndarray  # int64, 1 = passed
    reward: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Predictions:
    """One judge's verdicts, aligned to :class:`Items`. ``passed`` is False wherever ``abstained``."""

    judge: str
    path: Path
    passed: np.ndarray  # bool
    score: np.ndarray  # float64
    abstained: np.ndarray  # bool
    reason: tuple[str, ...]
    error: tuple[str | None, ...]

    @property
    def verdict(self) -> np.ndarray:
        return self.passed.astype(np.int64)


@dataclass(frozen=True)
class Ablation:
    number: int
    name: str
    predictions: Predictions


@dataclass
class Run:
    """A loaded, validated run directory (see the module docstring for the contract)."""

    run_dir: Path
    meta: dict
    items: Items
    judges: tuple[str, ...]
    induced: str
    graded: bool
    predictions: dict[str, Predictions]
    ablations: tuple[Ablation, ...] = ()
    attribution: dict[str, Any] | None = None
    rubric: str | None = None
    sweep: list[dict] | None = None
    warnings: list[str] = field(default_factory=list)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunError(f"{path}: not valid JSON ({error})") from None


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(f"{path}: file not found") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunError(f"{path}:{lineno}: not valid JSON ({error})") from None
        if not isinstance(record, dict):
            raise RunError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_record(path: Path, lineno: int, r: dict) -> None:
    where = f"{path}:{lineno}"
    missing = [k for k in _REQUIRED if k not in r]
    if missing:
        raise RunError(f"{where}: missing field(s) {', '.join(missing)}")
    if not isinstance(r["id"], str) or not r["id"]:
        raise RunError(f"{where}: id must be a non-empty string, got {r['id']!r}")
    for key in ("task_id", "domain", "agent"):
        if not isinstance(r[key], str):
            raise RunError(f"{where}: {key} must be a string, got {r[key]!r} (id {r['id']})")
    if not _is_int(r["n_steps"]) or r["n_steps"] < 0:
        raise RunError(f"{where}: n_steps must be a non-negative integer, got {r['n_steps']!r} (id {r['id']})")
    for key in ("passed", "abstained"):
        if not isinstance(r[key], bool):
            raise RunError(f"{where}: {key} must be true/false, got {r[key]!r} (id {r['id']})")
    if not _is_real(r["score"]) or not 0.0 <= r["score"] <= 1.0:
        raise RunError(f"{where}: score must be a finite number in [0, 1], got {r['score']!r} (id {r['id']})")
    if r["label"] not in (0, 1) or not isinstance(r["label"], (int, bool)):
        raise RunError(f"{where}: label must be 0 or 1, got {r['label']!r} (id {r['id']})")
    if not _is_real(r["reward"]):
        raise RunError(f"{where}: reward must be a finite number, got {r['reward']!r} (id {r['id']})")
    for key in ("reason", "error"):
        if r[key] is not None and not isinstance(r[key], str):
            raise RunError(f"{where}: {key} must be a string or null, got {type(r[key]).__name__} (id {r['id']})")


def _id_list(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > limit else "")


def _load_records(path: Path) -> dict[str, dict]:
    records: dict[str, dict] = {}
    for lineno, r in _read_jsonl(path):
        _check_record(path, lineno, r)
        if r["id"] in records:
            raise RunError(f"{path}:{lineno}: duplicate id {r['id']!r}")
        records[r["id"]] = r
    if not records:
        raise RunError(f"{path}: no predictions (empty file)")
    return records


def _items_from(records: dict[str, dict]) -> Items:
    ids = tuple(sorted(records))
    rs = [records[i] for i in ids]
    return Items(
        ids=ids,
        task_id=tuple(r["task_id"] for r in rs),
        domain=tuple(r["domain"] for r in rs),
        agent=tuple(r["agent"] for r in rs),
        n_steps=np.array([r["n_steps"] for r in rs], dtype=np.int64),
        label=np.array([int(r["label"]) for r in rs], dtype=np.int64),
        reward=np.array([float(r["reward"]) for r in rs], dtype=np.float64),
    )


def _align(judge: str, path: Path, records: dict[str, dict], reference: dict[str, dict], ref_path: Path,
           items: Items, notes: list[str]) -> Predictions:
    missing = sorted(set(reference) - set(records))
    extra = sorted(set(records) - set(reference))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} id(s) present in {ref_path.name}: {_id_list(missing)}")
        if extra:
            parts.append(f"{len(extra)} extra id(s) not in {ref_path.name}: {_id_list(extra)}")
        raise RunError(f"{path}: ids do not match {ref_path}; " + "; ".join(parts))
    rs = [records[i] for i in items.ids]
    for r in rs:
        ref = reference[r["id"]]
        for key in _ITEM_FIELDS:
            a, b = r[key], ref[key]
            same = (float(a) == float(b)) if key in ("label", "reward") else a == b
            if not same:
                raise RunError(f"{path}: id {r['id']!r} has {key}={a!r} but {ref_path.name} has {b!r}; "
                               "all judges must be scored on the same items")
    abstained = np.array([r["abstained"] for r in rs], dtype=bool)
    raw_passed = np.array([r["passed"] for r in rs], dtype=bool)
    both = int((abstained & raw_passed).sum())
    if both:
        notes.append(f"{_rel(path, path.parent.parent)}: {both} abstained item(s) were persisted with "
                     "passed=true; counted as fail verdicts")
    return Predictions(
        judge=judge,
        path=path,
        passed=raw_passed & ~abstained,
        score=np.array([float(r["score"]) for r in rs], dtype=np.float64),
        abstained=abstained,
        reason=tuple(" ".join(str(r["reason"] or "").split()) for r in rs),
        error=tuple(r["error"] for r in rs),
    )


def _rubric_from(meta: dict, run_dir: Path, notes: list[str]) -> str | None:
    rubric = meta.get("rubric")
    if isinstance(rubric, str) and rubric.strip():
        return rubric
    program = meta.get("program")
    if isinstance(program, str) and program:
        path = Path(program)
        candidates = [path] if path.is_absolute() else [run_dir / path, path]
        for p in candidates:
            if p.is_file():
                try:
                    data = json.loads(p.read_text(encoding="utf-8"))
                    text = data.get("rubricforge", {}).get("rubric")
                except (OSError, ValueError, AttributeError):
                    text = None
                if isinstance(text, str) and text.strip():
                    return text
        notes.append(f"run.json: no 'rubric' and no readable rubric in program {program!r}; "
                     "criteria are named from ablation file names only")
    return None


_ABLATION_FILE = re.compile(r"^(\d+)_(.+)\.jsonl$")


def _load_ablations(run_dir: Path, reference: dict[str, dict], ref_path: Path, items: Items,
                    criteria: list[Criterion], notes: list[str]) -> tuple[Ablation, ...]:
    adir = run_dir / "ablation"
    if not adir.is_dir():
        return ()
    names: dict[int, str] = {c.number: c.name for c in criteria}
    listed: set[int] = set()
    cpath = adir / "criteria.json"
    if cpath.exists():
        data = _read_json(cpath)
        if not isinstance(data, list):
            raise RunError(f"{cpath}: expected a list of {{number, name}} objects")
        for entry in data:
            if not (isinstance(entry, dict) and _is_int(entry.get("number")) and isinstance(entry.get("name"), str)):
                raise RunError(f"{cpath}: bad entry {entry!r}; expected {{\"number\": int, \"name\": str}}")
            names[entry["number"]] = entry["name"]
            listed.add(entry["number"])
    out = []
    seen: dict[int, Path] = {}
    for path in sorted(adir.glob("*.jsonl")):
        m = _ABLATION_FILE.match(path.name)
        if not m:
            raise RunError(f"{path}: ablation files must be named <criterion-number>_<slug>.jsonl")
        number = int(m[1])
        if number in seen:
            raise RunError(f"{path}: second ablation file for criterion {number} (also {seen[number].name})")
        seen[number] = path
        name = names.get(number) or m[2].replace("-", " ").replace("_", " ")
        records = _load_records(path)
        preds = _align(f"-{number}", path, records, reference, ref_path, items, notes)
        out.append(Ablation(number=number, name=name, predictions=preds))
    for number in sorted(listed - set(seen)):
        notes.append(f"ablation/criteria.json lists criterion {number} ({names[number]}) but no "
                     f"ablation/{number}_*.jsonl exists; not ablated")
    return tuple(sorted(out, key=lambda a: a.number))


def _load_attribution(run_dir: Path, items: Items, notes: list[str]) -> dict[str, Any] | None:
    path = run_dir / "attribution.jsonl"
    if not path.exists():
        return None
    out: dict[str, Any] = {}
    for lineno, r in _read_jsonl(path):
        if not isinstance(r.get("id"), str) or "criterion" not in r:
            raise RunError(f"{path}:{lineno}: expected {{\"id\": str, \"criterion\": number|name|null}}")
        crit = r["criterion"]
        if isinstance(crit, bool) or not (crit is None or isinstance(crit, (str, int))):
            raise RunError(f"{path}:{lineno}: criterion must be a number, a name or null, got {crit!r}")
        if r["id"] in out:
            raise RunError(f"{path}:{lineno}: duplicate id {r['id']!r}")
        out[r["id"]] = crit
    unknown = sorted(set(out) - set(items.ids))
    if unknown:
        notes.append(f"attribution.jsonl: {len(unknown)} id(s) not in the test predictions ignored: "
                     f"{_id_list(unknown, 5)}")
    return out


def _resolve_run_dir(path: str | Path) -> Path:
    path = Path(path)
    if path.is_file() and path.name == "run.json":
        return path.parent
    if not (path / "run.json").exists() and path.name == "predictions" and (path.parent / "run.json").exists():
        return path.parent
    return path


def load_run(run_dir: str | Path) -> Run:
    """Load and validate a run directory (or its ``predictions/`` folder); raises :class:`RunError`."""
    run_dir = _resolve_run_dir(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"{run_dir}: run directory not found")
    meta = _read_json(run_dir / "run.json")
    if not isinstance(meta, dict):
        raise RunError(f"{run_dir / 'run.json'}: expected a JSON object")
    notes: list[str] = []
    pdir = run_dir / "predictions"
    judges = meta.get("judges")
    if judges is None:
        judges = [p.stem for p in sorted(pdir.glob("*.jsonl"))]
        if not judges:
            raise RunError(f"{pdir}: no predictions/<judge>.jsonl files and no 'judges' in run.json")
    if not (isinstance(judges, list) and judges and all(isinstance(j, str) and j for j in judges)):
        raise RunError(f"{run_dir / 'run.json'}: 'judges' must be a non-empty list of judge names")
    if len(set(judges)) != len(judges):
        raise RunError(f"{run_dir / 'run.json'}: 'judges' lists a judge twice: {judges}")
    induced = meta.get("induced", "induced")
    if induced not in judges:
        raise RunError(f"{run_dir / 'run.json'}: induced judge {induced!r} is not in judges {judges}")
    absent = [j for j in judges if not (pdir / f"{j}.jsonl").is_file()]
    if absent:
        raise RunError(f"{pdir}: missing prediction file(s) " + ", ".join(f"{j}.jsonl" for j in absent)
                       + " for judges listed in run.json")
    unlisted = sorted(p.name for p in pdir.glob("*.jsonl") if p.stem not in judges)
    if unlisted:
        notes.append(f"predictions/: file(s) not listed in run.json 'judges' ignored: {', '.join(unlisted)}")

    ref_path = pdir / f"{judges[0]}.jsonl"
    reference = _load_records(ref_path)
    items = _items_from(reference)
    predictions = {judges[0]: _align(judges[0], ref_path, reference, reference, ref_path, items, notes)}
    for judge in judges[1:]:
        path = pdir / f"{judge}.jsonl"
        predictions[judge] = _align(judge, path, _load_records(path), reference, ref_path, items, notes)

    graded = meta.get("graded")
    if graded is None:
        graded = bool(np.any((items.reward != 0.0) & (items.reward != 1.0)))
    elif not isinstance(graded, bool):
        raise RunError(f"{run_dir / 'run.json'}: 'graded' must be true/false, got {graded!r}")

    rubric = _rubric_from(meta, run_dir, notes)
    criteria = parse_criteria(rubric) if rubric else []
    ablations = _load_ablations(run_dir, reference, ref_path, items, criteria, notes)
    attribution = _load_attribution(run_dir, items, notes)
    sweep = meta.get("sweep")
    if sweep is not None and not (isinstance(sweep, list) and all(isinstance(r, dict) for r in sweep)):
        raise RunError(f"{run_dir / 'run.json'}: 'sweep' must be a list of row objects")
    return Run(run_dir=run_dir, meta=meta, items=items, judges=tuple(judges), induced=induced, graded=graded,
               predictions=predictions, ablations=ablations, attribution=attribution, rubric=rubric,
               sweep=sweep or None, warnings=notes)


# --------------------------------------------------------------------------------------
# Attribution
# --------------------------------------------------------------------------------------

_STOP = frozenset("""about after also and any are been before but can each every for from has have into
its made more most must not only other over same some such than that the their them then there these
this those was were what when where which while with without within""".split())
_EXPLICIT = re.compile(r"\bcriteri(?:on|a)\s*(?:#|no\.?\s*)?(\d+)\b")


def _stems(name: str) -> list[str]:
    words = re.findall(r"[a-z]+", name.lower())
    return sorted({w[:5] for w in words if len(w) >= 4 and w not in _STOP})


def _label(c: Criterion) -> str:
    return f"{c.number}. {c.name}"


def attribute_reason(reason: str, criteria: Sequence[Criterion]) -> str | None:
    """The criterion a verdict's ``reason`` points at, as ``"N. Name"``, or None.

    In order: an explicit "criterion N"; else the criterion whose full name appears earliest;
    else the criterion whose name keywords (5-letter stems of its words of 4+ letters) occur most
    often as word prefixes, ties broken by the earliest occurrence, then by number.
    """
    text = " ".join((reason or "").lower().split())
    if not text or not criteria:
        return None
    by_number = {c.number: c for c in criteria}
    for m in _EXPLICIT.finditer(text):
        if int(m[1]) in by_number:
            return _label(by_number[int(m[1])])
    named = [(text.find(c.name.lower()), c.number) for c in criteria if c.name and c.name.lower() in text]
    if named:
        return _label(by_number[min(named)[1]])
    best: tuple | None = None
    for c in criteria:
        positions = []
        for stem in _stems(c.name):
            m = re.search(r"\b" + re.escape(stem), text)
            if m:
                positions.append(m.start())
        if positions:
            key = (-len(positions), min(positions), c.number)
            if best is None or key < best[0]:
                best = (key, c)
    return _label(best[1]) if best else None


def _normalize_attribution(value: Any, criteria: Sequence[Criterion]) -> str | None:
    if value is None:
        return None
    by_number = {c.number: c for c in criteria}
    text = str(value).strip()
    if not text:
        return None
    m = re.match(r"^(\d+)\b", text)
    if m:
        number = int(m[1])
        if number in by_number:
            return _label(by_number[number])
        return text if not text.isdigit() else f"criterion {number}"
    for c in criteria:
        if c.name.lower() == text.lower():
            return _label(c)
    return text


# --------------------------------------------------------------------------------------
# Computation
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _collect(notes: list[str], label: str):
    """Record warnings raised inside as report notes ``label: message`` (deduplicated, in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        msg = f"{label}: {w.message}"
        if msg not in notes:
            notes.append(msg)


def _clean(x: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, nan/inf to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def _rows_mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=1)


_SUM_CHUNK = 1 << 20  # resample-by-item elements per multiplicity chunk (8 MiB as float64)


def _resampled_sums(columns: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Per-resample sums of every column of ``columns`` (shape ``(n, k)``) -> shape ``(n_resamples, k)``.

    One bootstrap for every whole-test-set statistic of a report. The index matrix is the one
    :func:`metrics.bootstrap_ci` draws for the same ``n`` and ``seed`` (same generator, same blocks),
    so intervals agree with the metrics functions (exactly for 0/1 columns, up to floating-point
    summation order otherwise). Each chunk of index rows becomes a multiplicity matrix ``W``
    (``W[r, j]`` = how often item ``j`` is in resample ``r``) and the sums of all columns, for all
    judges, are one product ``W @ columns``: one index draw for the whole report instead of one draw
    and one gather per statistic and judge. Memory stays bounded by the chunk size.
    """
    columns = np.asarray(columns, dtype=np.float64)
    n = columns.shape[0]
    rng = np.random.default_rng(seed)
    out = []
    step = max(1, _SUM_CHUNK // n)
    for block in M._index_blocks(n, n_resamples, rng):
        for start in range(0, block.shape[0], step):
            idx = block[start:start + step]
            rows = idx.shape[0]
            flat = (np.arange(rows, dtype=np.int64)[:, None] * n + idx).ravel()
            weights = np.bincount(flat, minlength=rows * n).reshape(rows, n).astype(np.float64)
            out.append(weights @ columns)
    return np.concatenate(out)


def _interval(replicates: np.ndarray, confidence: float, what: str) -> M.ConfidenceInterval:
    return M._percentile_interval(np.asarray(replicates, dtype=np.float64), confidence, what)


def _whole_set_replicates(run: Run, y: np.ndarray, n_resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Bootstrap replicates of accuracy and false-pass rate per judge (columns in ``run.judges``
    order) and, for graded runs, of ``mean(|score - reward|) - mean(|induced score - reward|)`` per
    non-induced judge."""
    verdicts = np.column_stack([run.predictions[j].verdict for j in run.judges])
    blocks = [verdicts == y[:, None], (verdicts == 1) & (y[:, None] == 0), (y == 0)[:, None]]
    others = [j for j in run.judges if j != run.induced]
    if run.graded and others:
        err_ind = np.abs(run.predictions[run.induced].score - run.items.reward)
        blocks.append(np.column_stack([np.abs(run.predictions[j].score - run.items.reward) - err_ind
                                       for j in others]))
    sums = _resampled_sums(np.hstack([np.asarray(b, dtype=np.float64) for b in blocks]), n_resamples, seed)
    n, J = len(y), len(run.judges)
    fails = sums[:, 2 * J]
    with np.errstate(invalid="ignore", divide="ignore"):
        fpr = np.where(fails[:, None] > 0, sums[:, J:2 * J] / np.maximum(fails, 1)[:, None], np.nan)
    out = {"accuracy": sums[:, :J] / n, "false_pass_rate": fpr}
    if run.graded and others:
        out["abs_error_diff"] = sums[:, 2 * J + 1:] / n
    return out


def _main_rows(run: Run, y: np.ndarray, reps: dict[str, np.ndarray], confidence: float,
               notes: list[str]) -> list[dict]:
    induced = run.predictions[run.induced]
    acc_reps, fpr_reps = reps["accuracy"], reps["false_pass_rate"]
    rows = []
    for k, judge in enumerate(run.judges):
        p = run.predictions[judge]
        v = p.verdict
        with _collect(notes, judge):
            c = M.confusion_counts(y, v)
            acc_ci = _interval(acc_reps[:, k], confidence, "accuracy CI")
            fpr_ci = _interval(fpr_reps[:, k], confidence, "false-pass rate CI")
            row = {
                "judge": judge, "induced": judge == run.induced, "n": int(y.size), **c,
                "accuracy": M.accuracy(y, v), "accuracy_ci_low": acc_ci.low, "accuracy_ci_high": acc_ci.high,
                "f1": M.f1_positive(y, v), "kappa": M.cohens_kappa(y, v), "auc": M.roc_auc(y, p.score),
                "predicted_positive_rate": M.predicted_positive_rate(v),
                "false_pass_rate": M.false_pass_rate(y, v),
                "false_pass_ci_low": fpr_ci.low, "false_pass_ci_high": fpr_ci.high,
                "false_fail_count": c["fn"], "abstained": int(p.abstained.sum()),
                "abstained_on_passed": int((p.abstained & (y == 1)).sum()),
                "abstained_on_failed": int((p.abstained & (y == 0)).sum()),
                "mcnemar": None,
            }
        if judge != run.induced:
            cmp = M.compare_paired(y, induced.verdict, v)
            row["mcnemar"] = {"b": cmp["b"], "c": cmp["c"], "p_value": cmp["p_value"], "mark": cmp["mark"]}
        rows.append(row)
    return rows


def _graded_rows(run: Run, reps: dict[str, np.ndarray], confidence: float, notes: list[str]) -> list[dict]:
    """Spearman / Kendall / MAE per judge, and a paired bootstrap of ``|score - reward|`` against the
    induced judge (same statistic and p-value as :func:`metrics.paired_bootstrap_abs_error`)."""
    r = run.items.reward
    err_ind = np.abs(run.predictions[run.induced].score - r)
    others = [j for j in run.judges if j != run.induced]
    diff_reps = reps.get("abs_error_diff")
    rows = []
    for judge in run.judges:
        p = run.predictions[judge]
        with _collect(notes, f"{judge} (graded)"):
            g = M.graded_summary(p.score, r)
            cmp = None
            if judge != run.induced:
                rep = diff_reps[:, others.index(judge)]
                d = np.abs(p.score - r) - err_ind
                ci = _interval(rep, confidence, "paired |score - reward| bootstrap")
                below = min(np.count_nonzero(rep <= 0.0), np.count_nonzero(rep >= 0.0))
                pv = min(1.0, 2.0 * (below + 1) / (rep.size + 1))
                cmp = {"mean_diff": float(d.mean()), "ci_low": ci.low, "ci_high": ci.high, "p_value": float(pv),
                       "mae_a": float(np.abs(p.score - r).mean()), "mae_b": float(err_ind.mean()),
                       "mark": M.significance_mark(pv)}
        rows.append({"judge": judge, "induced": judge == run.induced, "spearman": g["spearman"],
                     "kendall": g["kendall"], "mae": g["mae"], "vs_induced": cmp})
    return rows


def _ablation(run: Run, y: np.ndarray, notes: list[str]) -> dict | None:
    if not run.ablations:
        return None
    full = run.predictions[run.induced]

    def stats(p: Predictions, label: str) -> dict:
        with _collect(notes, label):
            out = {"accuracy": M.accuracy(y, p.verdict), "kappa": M.cohens_kappa(y, p.verdict),
                   "false_pass_rate": M.false_pass_rate(y, p.verdict), "abstained": int(p.abstained.sum())}
            if run.graded:
                out["mae"] = M.mean_abs_error(p.score, run.items.reward)
        return out

    base = stats(full, f"{run.induced} (ablation baseline)")
    rows = []
    for a in run.ablations:
        s = stats(a.predictions, f"ablation {a.number}")
        c = M.compare_paired(y, full.verdict, a.predictions.verdict)
        row = {"number": a.number, "name": a.name, "file": _rel(a.predictions.path, run.run_dir), **s}
        for key in ("accuracy", "kappa", "false_pass_rate") + (("mae",) if run.graded else ()):
            row[f"delta_{key}"] = s[key] - base[key]
        row["mcnemar"] = {"b": c["b"], "c": c["c"], "p_value": c["p_value"], "mark": c["mark"]}
        rows.append(row)
    return {"full": base, "rows": rows}


def _tertiles(n_steps: np.ndarray) -> list[tuple[str, np.ndarray]]:
    q1, q2 = np.quantile(n_steps.astype(np.float64), [1.0 / 3.0, 2.0 / 3.0])
    bins = [("short", n_steps <= q1), ("medium", (n_steps > q1) & (n_steps <= q2)), ("long", n_steps > q2)]
    out = []
    for name, mask in bins:
        if mask.any():
            lo, hi = int(n_steps[mask].min()), int(n_steps[mask].max())
            span = f"{lo} steps" if lo == hi else f"{lo}–{hi} steps"
            out.append((f"{name} ({span})", mask))
    return out


def _gap_row(group: str, stratum: str, mask: np.ndarray, y: np.ndarray, ind: np.ndarray, ref: np.ndarray,
             n_resamples: int, seed: int, confidence: float, notes: list[str]) -> dict:
    failed = mask & (y == 0)
    nf = int(failed.sum())
    row = {"group": group, "stratum": stratum, "n": int(mask.sum()), "n_failed": nf,
           "induced_false_passes": int((ind & failed).sum()), "baseline_false_passes": int((ref & failed).sum()),
           "induced_fpr": math.nan, "baseline_fpr": math.nan, "gap": math.nan, "gap_ci_low": math.nan,
           "gap_ci_high": math.nan, "b": 0, "c": 0, "p_value": math.nan, "mark": "ns"}
    if nf == 0:
        return row
    i, r = ind[failed].astype(np.float64), ref[failed].astype(np.float64)
    d = r - i  # per failed item: +1 baseline false pass caught by induced, -1 the reverse
    with _collect(notes, f"false-pass gap, {group} = {stratum}"):
        ci = M.bootstrap_ci(_rows_mean, d, n_resamples=n_resamples, confidence=confidence, seed=seed,
                            vectorized=True)
    # Exact McNemar on the failed items: "correct" = judged fail.
    mc = M.mcnemar_exact(i == 0, r == 0)
    row.update(induced_fpr=float(i.mean()), baseline_fpr=float(r.mean()), gap=float(d.mean()),
               gap_ci_low=ci.low, gap_ci_high=ci.high, b=mc.b, c=mc.c, p_value=mc.p_value,
               mark=M.significance_mark(mc.p_value))
    return row


def _stratification(run: Run, y: np.ndarray, n_resamples: int, seed: int, confidence: float,
                    notes: list[str]) -> dict | None:
    if BASELINE not in run.predictions or BASELINE == run.induced:
        return None
    ind = run.predictions[run.induced].passed
    ref = run.predictions[BASELINE].passed
    it = run.items
    args = (y, ind, ref, n_resamples, seed, confidence, notes)
    rows = [_gap_row("all", "all items", np.ones(len(it), dtype=bool), *args)]
    for group, values in (("domain", np.array(it.domain, dtype=object)), ("agent", np.array(it.agent, dtype=object))):
        for value in sorted(set(values.tolist())):
            rows.append(_gap_row(group, value, values == value, *args))
    for stratum, mask in _tertiles(it.n_steps):
        rows.append(_gap_row("length", stratum, mask, *args))
    return {"baseline": BASELINE, "rows": rows}


_CATEGORIES = (
    ("baseline_false_pass", "failed; {b} passed it, {i} failed it"),
    ("induced_false_fail", "passed; {i} failed it, {b} passed it"),
    ("induced_false_pass", "failed; {i} passed it, {b} failed it"),
    ("baseline_false_fail", "passed; {b} failed it, {i} passed it"),
)


def _verdict_text(p: Predictions, k: int) -> str:
    if p.abstained[k]:
        return "abstain (fail)"
    return f"{'pass' if p.passed[k] else 'fail'} ({p.score[k]:.2f})"


def _disagreements(run: Run, y: np.ndarray, notes: list[str]) -> dict | None:
    if BASELINE not in run.predictions or BASELINE == run.induced:
        return None
    ind, ref = run.predictions[run.induced], run.predictions[BASELINE]
    criteria = parse_criteria(run.rubric) if run.rubric else []
    if run.attribution is not None:
        source = "attribution.jsonl"
    elif criteria:
        source = "keywords of the induced reason"
    else:
        source = "none (no rubric in run.json and no attribution.jsonl)"
    rows = []
    for k in np.flatnonzero(ind.passed != ref.passed):
        k = int(k)
        truth = int(y[k])
        if truth == 0:
            category = "baseline_false_pass" if ref.passed[k] else "induced_false_pass"
        else:
            category = "induced_false_fail" if ref.passed[k] else "baseline_false_fail"
        item_id = run.items.ids[k]
        if run.attribution is not None:
            crit = _normalize_attribution(run.attribution.get(item_id), criteria)
        else:
            crit = attribute_reason(ind.reason[k], criteria)
        reason = ind.reason[k] or (f"[abstained: {ind.error[k]}]" if ind.abstained[k] else "")
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 1].rstrip() + "…"
        rows.append({"id": item_id, "domain": run.items.domain[k], "label": truth,
                     "reward": float(run.items.reward[k]), "category": category,
                     "induced_right": category.startswith("baseline"),
                     "induced": _verdict_text(ind, k), "baseline": _verdict_text(ref, k),
                     "criterion": crit or "unattributed", "reason": reason})
    order = {c: i for i, (c, _) in enumerate(_CATEGORIES)}
    rows.sort(key=lambda r: (order[r["category"]], r["id"]))
    counts = {c: sum(r["category"] == c for r in rows) for c, _ in _CATEGORIES}
    by_crit: dict[str, dict] = {}
    for r in rows:
        e = by_crit.setdefault(r["criterion"], {"criterion": r["criterion"], "n": 0, "induced_right": 0,
                                                 "induced_wrong": 0})
        e["n"] += 1
        e["induced_right" if r["induced_right"] else "induced_wrong"] += 1

    def crit_key(e: dict) -> tuple:
        m = re.match(r"^(\d+)\.", e["criterion"])
        return (e["criterion"] == "unattributed", int(m[1]) if m else math.inf, e["criterion"])

    return {"baseline": BASELINE, "attribution_source": source, "counts": counts, "rows": rows,
            "by_criterion": sorted(by_crit.values(), key=crit_key)}


def _sweep(run: Run) -> dict | None:
    if not run.sweep:
        return None
    rows = []
    for i, r in enumerate(run.sweep):
        rows.append({"candidate": r.get("candidate", i), "parents": r.get("parents"),
                     "val_score": r.get("val_score"), "val_agreement": r.get("val_agreement"),
                     "discovered_at_metric_call": r.get("discovered_at_metric_call"),
                     "rubric_sha256": r.get("rubric_sha256"), "rubric_chars": r.get("rubric_chars")})
    scored = [i for i, r in enumerate(rows) if _is_real(r["val_score"])]
    best = max(scored, key=lambda i: (rows[i]["val_score"], -i)) if scored else None
    return {"rows": rows, "best": best}


def compute_report(run: Run, *, n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95) -> dict:
    """Every number of the report as a JSON-safe dict (nan -> None); deterministic for fixed inputs."""
    y = run.items.label
    notes = list(run.warnings)
    it = run.items
    M._check_bootstrap_params(n_resamples, confidence)
    reps = _whole_set_replicates(run, y, n_resamples, seed)
    n_passed = int(y.sum())
    meta = run.meta
    report = {
        "meta": {
            "run": run.run_dir.name, "lm": meta.get("lm"), "reflection_lm": meta.get("reflection_lm"),
            "dataset": meta.get("dataset"), "split": meta.get("split"), "induced": run.induced,
            "judges": list(run.judges), "graded": run.graded, "notes": meta.get("notes"),
            "program": meta.get("program"),
        },
        "settings": {"n_resamples": n_resamples, "seed": seed, "confidence": confidence,
                     "baseline": BASELINE, "reason_chars": REASON_CHARS},
        "items": {"n": len(it), "n_passed": n_passed, "n_failed": len(it) - n_passed,
                  "base_pass_rate": n_passed / len(it), "domains": sorted(set(it.domain)),
                  "agents": sorted(set(it.agent)), "n_steps_min": int(it.n_steps.min()),
                  "n_steps_max": int(it.n_steps.max())},
        "main": _main_rows(run, y, reps, confidence, notes),
        "graded": _graded_rows(run, reps, confidence, notes) if run.graded else None,
        "ablation": _ablation(run, y, notes),
        "stratification": _stratification(run, y, n_resamples, seed, confidence, notes),
        "disagreements": _disagreements(run, y, notes),
        "sweep": _sweep(run),
    }
    report["warnings"] = notes
    return _clean(report)


# --------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------


def _num(x: Any, digits: int = 3, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _ci(low: Any, high: Any, digits: int = 3, signed: bool = False) -> str:
    if low is None or high is None:
        return "[n/a]"
    return f"[{_num(low, digits, signed)}, {_num(high, digits, signed)}]"


def _p(p: Any) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _cell(x: Any) -> str:
    return " ".join(str(x).split()).replace("|", "\\|") if x is not None else "—"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> list[str]:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _judge_name(row: dict) -> str:
    if not row.get("induced"):
        return row["judge"]
    return f"**{row['judge']}**" + ("" if row["judge"] == "induced" else " (induced)")


def _split_table(split: Any) -> list[str]:
    if isinstance(split, dict) and split and all(isinstance(v, dict) for v in split.values()):
        keys: list[str] = []
        for v in split.values():
            keys += [k for k in v if k not in keys]
        return _table(["split", *keys], [[name, *(v.get(k) for k in keys)] for name, v in split.items()])
    return [f"Split: `{json.dumps(split, sort_keys=True)}`"]


def _figure(links: dict[str, str] | None, name: str, alt: str) -> list[str]:
    if links and name in links:
        return ["", f"![{alt}]({links[name]})"]
    return []


HOW_TO_READ = (
    "**False-pass rate comes first.** It is the share of *failed* trajectories the judge passed "
    "(FP / (FP + TN)). A judge used to score agents, filter training data or serve as a reward "
    "over-credits exactly through false passes: each one counts a failure as a success, inflates the "
    "agent's measured success rate, and rewards behaviour that only looks successful (a confident closing "
    "message, a claimed booking no tool call shows). A false fail costs less: it under-credits and is "
    "visible as a lower pass rate. Accuracy and F1 mix the two errors and depend on the base pass rate, so "
    "a lenient judge can look accurate on a mostly-passing test set; compare the predicted-pass rate with the "
    "base pass rate to see leniency directly. Abstentions are counted and scored as fail verdicts, so a "
    "judge cannot lower its false-pass rate by abstaining without paying in false fails. McNemar compares "
    "each judge's per-item correctness with the induced judge's on the same items (exact binomial test on "
    "the discordant items; `b` = only the induced judge right, `c` = only this judge right). Marks: "
    "`***` p < 0.001, `**` p < 0.01, `*` p < 0.05, `ns` otherwise. Intervals are 95% percentile bootstrap "
    "intervals over items."
)


def render_markdown(report: dict, figure_links: dict[str, str] | None = None) -> str:
    """The report as markdown. ``figure_links`` maps figure names (see ``figures.FIGURES``) to
    relative paths; figures are embedded only when given."""
    meta, items, settings = report["meta"], report["items"], report["settings"]
    induced = meta["induced"]
    base = settings["baseline"]
    conf = int(round(100 * settings["confidence"]))
    out: list[str] = []
    title = f"# Judge report: {meta.get('dataset') or meta['run']}"
    out += [title, ""]
    facts = [
        f"judge LM `{meta.get('lm') or 'n/a'}`",
        f"reflection LM `{meta.get('reflection_lm') or 'n/a'}`",
        f"induced judge `{induced}`",
        f"{items['n']} test items ({items['n_passed']} passed, {items['n_failed']} failed; "
        f"base pass rate {_num(items['base_pass_rate'])})",
        "graded rewards" if meta["graded"] else "binary rewards",
        f"{settings['n_resamples']} bootstrap resamples (seed {settings['seed']}), {conf}% percentile intervals",
    ]
    out += ["- " + f for f in facts]
    if meta.get("program"):
        out.append(f"- frozen program `{meta['program']}`")
    if meta.get("notes"):
        out.append(f"- notes: {_cell(meta['notes'])}")
    out += ["", "## How to read this", "", HOW_TO_READ, ""]
    if meta.get("split") is not None:
        out += ["## Split", "", *_split_table(meta["split"]), ""]

    # Main table.
    out += ["## Main table", ""]
    header = ["judge", f"false-pass rate [{conf}% CI]", "n", f"accuracy [{conf}% CI]", "F1", "κ", "AUC",
              "false fails", "pred. pass rate", "abstained", f"McNemar vs {induced} b/c", "p", "mark"]
    rows = []
    for r in report["main"]:
        mc = r["mcnemar"]
        rows.append([
            _judge_name(r), f"{_num(r['false_pass_rate'])} {_ci(r['false_pass_ci_low'], r['false_pass_ci_high'])}",
            r["n"], f"{_num(r['accuracy'])} {_ci(r['accuracy_ci_low'], r['accuracy_ci_high'])}", _num(r["f1"]),
            _num(r["kappa"]), _num(r["auc"]), r["false_fail_count"], _num(r["predicted_positive_rate"]),
            r["abstained"], f"{mc['b']}/{mc['c']}" if mc else "—", _p(mc["p_value"]) if mc else "—",
            mc["mark"] if mc else "—",
        ])
    out += _table(header, rows)
    out += [
        "",
        f"False-pass rate = FP / failed items ({items['n_failed']} failed); false fails = passed items judged "
        f"fail; predicted pass rate vs base pass rate {_num(items['base_pass_rate'])}. AUC ranks the judge's "
        "score (abstentions score as persisted).",
    ]
    out += _figure(figure_links, "over_credit",
                   "False-pass rate per judge with 95% bootstrap CI")
    out.append("")

    # Error decomposition.
    out += ["## Error decomposition", ""]
    header = ["judge", "FP (false pass)", "TP", "FN (false fail)", "TN", "abstained on passed",
              "abstained on failed"]
    out += _table(header, [[_judge_name(r), r["fp"], r["tp"], r["fn"], r["tn"], r["abstained_on_passed"],
                            r["abstained_on_failed"]] for r in report["main"]])
    out += ["", "Positive class = passed. Abstentions are already inside FN / TN (they are fail verdicts)."]
    out += _figure(figure_links, "confusion", "Confusion decomposition per judge")
    out.append("")

    # Ranking vs calibration.
    out += ["## Ranking vs calibration", ""]
    if report["graded"] is None:
        out += ["Not a graded run (rewards are pass/fail): ranking quality is the AUC column of the main table."]
    else:
        header = ["judge", "Spearman ρ", "Kendall τ-b", "MAE vs reward", f"ΔMAE vs {induced} [{conf}% CI]",
                  "p", "mark"]
        rows = []
        for r in report["graded"]:
            v = r["vs_induced"]
            rows.append([_judge_name(r), _num(r["spearman"]), _num(r["kendall"]), _num(r["mae"]),
                         f"{_num(v['mean_diff'], signed=True)} {_ci(v['ci_low'], v['ci_high'], signed=True)}"
                         if v else "—", _p(v["p_value"]) if v else "—", v["mark"] if v else "—"])
        out += _table(header, rows)
        out += ["", f"Ranking: Spearman / Kendall of score against reward (higher is better). Calibration: mean "
                f"|score − reward| (lower is better). ΔMAE = MAE(judge) − MAE({induced}), paired bootstrap over "
                f"items; positive means the judge is further from the rewards than {induced}."]
    out += _figure(figure_links, "calibration", "Judge score against ground truth")
    out.append("")

    # Ablation.
    out += ["## Criterion ablation (leave one out)", ""]
    ab = report["ablation"]
    if ab is None:
        out += ["No ablation in this run (no `ablation/` directory)."]
    else:
        f = ab["full"]
        graded = "mae" in f
        header = ["removed criterion", "false-pass rate", "Δ false-pass", "accuracy", "Δ accuracy", "κ", "Δ κ"]
        header += ["MAE", "Δ MAE"] if graded else []
        header += ["abstained", "McNemar vs full b/c", "p", "mark"]
        rows = [["(none: full induced judge)", _num(f["false_pass_rate"]), "—", _num(f["accuracy"]), "—",
                 _num(f["kappa"]), "—", *([_num(f["mae"]), "—"] if graded else []), f["abstained"],
                 "—", "—", "—"]]
        for r in ab["rows"]:
            mc = r["mcnemar"]
            rows.append([f"{r['number']}. {r['name']}", _num(r["false_pass_rate"]),
                         _num(r["delta_false_pass_rate"], signed=True), _num(r["accuracy"]),
                         _num(r["delta_accuracy"], signed=True), _num(r["kappa"]), _num(r["delta_kappa"], signed=True),
                         *([_num(r["mae"]), _num(r["delta_mae"], signed=True)] if graded else []), r["abstained"],
                         f"{mc['b']}/{mc['c']}", _p(mc["p_value"]), mc["mark"]])
        out += _table(header, rows)
        out += ["", "Δ = ablated − full. A positive Δ false-pass means the removed criterion was stopping failed "
                "trajectories from passing; a negative Δ accuracy means it was helping overall. McNemar `b` = "
                "items only the full judge got right."]
    out.append("")

    # Stratification.
    out += ["## Where the false-pass gap comes from", ""]
    st = report["stratification"]
    if st is None:
        out += [f"Skipped: no `{base}` judge in this run."]
    else:
        header = ["group", "stratum", "n", "failed", f"{induced} false-pass rate", f"{base} false-pass rate",
                  f"gap ({base} − {induced}) [{conf}% CI]", "b/c", "p", "mark"]
        rows = []
        for r in st["rows"]:
            rows.append([r["group"], r["stratum"], r["n"], r["n_failed"],
                         f"{_num(r['induced_fpr'])} ({r['induced_false_passes']})",
                         f"{_num(r['baseline_fpr'])} ({r['baseline_false_passes']})",
                         f"{_num(r['gap'], signed=True)} {_ci(r['gap_ci_low'], r['gap_ci_high'], signed=True)}",
                         f"{r['b']}/{r['c']}", _p(r["p_value"]), r["mark"] if r["n_failed"] else "—"])
        out += _table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))
        out += ["", f"Computed on the failed items of each stratum (false passes in parentheses). Gap > 0: "
                f"`{induced}` passes fewer failed trajectories than `{base}`. CI: bootstrap over the stratum's "
                f"failed items; p: exact McNemar on them (`b` = failed items only `{induced}` failed, `c` = only "
                f"`{base}` failed). Length strata are tertiles of `n_steps`."]
    out.append("")

    # Disagreements.
    out += [f"## Disagreements: {induced} vs {base}", ""]
    dg = report["disagreements"]
    if dg is None:
        out += [f"Skipped: no `{base}` judge in this run."]
    else:
        c = dg["counts"]
        out += [f"{len(dg['rows'])} item(s) where the verdicts differ: {c['baseline_false_pass']} `{base}` false "
                f"pass(es) that `{induced}` failed, {c['induced_false_fail']} `{induced}` false fail(s), "
                f"{c['induced_false_pass']} `{induced}` false pass(es), {c['baseline_false_fail']} `{base}` "
                f"false fail(s). Criterion attribution: {dg['attribution_source']}.", ""]
        if dg["by_criterion"]:
            out += _table(["attributed criterion", "disagreements", f"{induced} right", f"{induced} wrong"],
                          [[e["criterion"], e["n"], e["induced_right"], e["induced_wrong"]]
                           for e in dg["by_criterion"]])
            out.append("")
            labels = {k: v.format(i=induced, b=base) for k, v in _CATEGORIES}
            truth_col = "truth (reward)" if meta["graded"] else "truth"
            header = ["id", "domain", truth_col, induced, base, "case", "criterion", f"{induced} reason"]
            rows = []
            for r in dg["rows"]:
                truth = "pass" if r["label"] else "fail"
                if meta["graded"]:
                    truth += f" ({r['reward']:.2f})"
                rows.append([f"`{r['id']}`", r["domain"], truth, r["induced"], r["baseline"], labels[r["category"]],
                             r["criterion"], r["reason"]])
            out += _table(header, rows, ["l"] * len(header))
    out.append("")

    # Sweep.
    out += ["## Induction sweep", ""]
    sw = report["sweep"]
    if sw is None:
        out += ["No sweep recorded in run.json."]
    else:
        header = ["candidate", "parents", "val score", "val agreement", "found at metric call", "rubric chars",
                  "rubric sha256", "best"]
        rows = []
        for i, r in enumerate(sw["rows"]):
            parents = ", ".join(str(p) for p in r["parents"]) if r["parents"] else "—"
            sha = (r["rubric_sha256"] or "")[:12] or None
            rows.append([r["candidate"], parents, _num(r["val_score"]), _num(r["val_agreement"]),
                         r["discovered_at_metric_call"], r["rubric_chars"], f"`{sha}`" if sha else None,
                         "★" if i == sw["best"] else ""])
        out += _table(header, rows)
        out += ["", "Best = highest validation score, earliest on ties (candidate 0 is the seed rubric)."]
        out += _figure(figure_links, "sweep", "Validation agreement against metric calls")
    out.append("")

    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {_cell(w)}" for w in report["warnings"]] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def write_report(run_dir: str | Path, out_path: str | Path, figures: bool = True, *,
                 n_resamples: int = 10_000, seed: int = 0) -> Path:
    """Load ``run_dir``, write ``out_path`` (markdown), ``<stem>.json`` (all numbers) and, with
    ``figures``, ``figures/*.png`` next to the markdown. Returns ``out_path``."""
    run = load_run(run_dir)
    report = compute_report(run, n_resamples=n_resamples, seed=seed)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    links: dict[str, str] = {}
    if figures:
        try:
            from rubricforge_dspy.figures import write_figures
        except ImportError as error:  # matplotlib is the optional `plots` extra
            report["warnings"].append(f"figures skipped: {error} (install rubricforge-dspy[plots])")
        else:
            written = write_figures(run, report, out_path.parent / FIGURES_DIR)
            links = {name: f"{FIGURES_DIR}/{path.name}" for name, path in written.items()}
    out_path.write_text(render_markdown(report, links), encoding="utf-8")
    out_path.with_suffix(".json").write_text(
        json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return out_path


def report_main(predictions_dir: str | Path, out_path: str | Path) -> Path:
    """CLI entry (``rubricforge report --predictions RUN/ --out RUN/report.md``): the run directory
    (or its ``predictions/`` folder) -> markdown report with figures. Returns the markdown path."""
    return write_report(_resolve_run_dir(predictions_dir), out_path, figures=True)
