"""`rubricforge map check`: a mapping tried on data before any judge reads it.

Reads the data through the mapping (every record, streamed), and reports how many records matched and
loaded, the records skipped and why, the first trajectory rendered exactly as the judge reads it, the
labels it gave, and, per mapped field, in how many records it resolved to nothing; a field empty in more
than `empty_share` of the records is flagged. It lives here, above the data layer, because it renders.

What the data show decides, not the mapping's shape:

* the error flag (``errors``, ``steps.error``, ``messages.error``) may be null everywhere (the output's text
  then decides, as for a built-in format): never "mostly empty". A flag that marks every one of the tool
  results as failed, or more than 90% where their text looks like an error in fewer than half, is a warning
  (a null negated with ``!`` is true);
* a label that is the same for every record (a value-set typo labels every record 0) is a warning;
* a **leak** is a problem: every record is rendered as the judge reads it and searched for what gives the
  label away: the label field's own value (``completedCorrect``, ``task_success``), a reward that is not a
  whole number, the label's or the reward's field name (``is_solved``, ``max_reward``), and the success words
  `SUCCESS_WORDS` where their presence follows the label (in at least half of one class's records and
  half as many fewer of the other's), or, with one class or none, where they are a whole step; and any
  **short token whose presence predicts the label** (`_Predictors`): a word or a ``name: value`` /
  ``name=value`` pair (``reward=1``, ``success: True``) of one mapped field's rendered text whose presence
  splits the labels almost perfectly (its share among one class's records less its share among the other's,
  Youden's J, at least `PREDICT_J` = 0.9, i.e. a balanced accuracy of at least 0.95, e.g. in 95% of one class
  and 5% of the other), over at least `PREDICT_MIN_CLASS` records of each class; reported with the field and
  the share of records its presence predicts. A pair named by an outcome word (`OUTCOME_NAMES`:
  ``success: True``, ``reward=1``, ``passed: false``) is held to the success words' rule instead (in at least
  half of one class's records, J at least 0.5): a planner's own verdict ending its plan (ADaPT's ALFWorld
  plans end in ``success: True`` / ``False``) gives the label away even where it is wrong in some records.
  Words are read from the steps' own text, so the renderer's markers (``TOOL CALL``, ``COUNTERS: steps=...``)
  are never tokens; a token in both classes alike (``the``, a tool every agent calls) splits nothing.

A field marked optional in the mapping (``{"path": ..., "optional": true}``) is counted and its share
reported like any other, and never fails the check however often it is empty.

A check is OK with no problem and no warning; warnings alone still exit 0 (``OK, with warnings``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.data.formats import LoadReport
from rubricforge_dspy.data.formats.mapping.reader import MapStats, iter_mapped
from rubricforge_dspy.data.formats.mapping.spec import Mapping, load_mapping
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory

_SHOWN_SKIPS = 10
ERROR_FIELDS = ("errors", "steps.error", "messages.error")
SUCCESS_WORDS = ("success", "successful", "succeeded", "correct", "completedCorrect", "passed", "resolved",
                 "solved", "task_success", "is_solved")
_FLAG_SHARE = 0.9  # a flag marking more than this share of results as failed, ...
_TEXT_SHARE = 0.5  # ... where the text agrees in fewer than this share of them, is a warning
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
PREDICT_J = 0.9  # share in one class - share in the other (Youden's J): a balanced accuracy of at least 0.95
PREDICT_MIN_CLASS = 10  # records of each label the token scan needs before it says anything
PREDICT_SCAN_RECORDS = 20_000  # labeled records the token scan reads (its counts grow with the vocabulary)
_MAX_WORD = 40
_TOKEN_WORD = re.compile(r"[A-Za-z0-9_]+(?:\.[0-9]+)?")
_TOKEN_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]{0,39})[\"']?[ \t]{0,3}([:=])[ \t]{0,3}[\"']?"
                         r"([A-Za-z0-9_.+-]{1,20})")
_SHOWN_PREDICTORS = 5  # per field
OUTCOME_NAMES = frozenset({word.lower() for word in SUCCESS_WORDS} | {"reward", "score", "label", "outcome", "won"})
_OUTCOME_J = 0.5  # the success words' rule: J at least this, and in at least half of one class


@dataclass
class MapCheckReport:
    """What `check_mapping` found.

    Attributes:
        mapping: the mapping file; name: the format name it defines; data: the data path.
        records: records the mapping's ``records`` matched and read; unreadable: records or files that could
            not be parsed (also in `skipped`); loaded: trajectories built.
        skipped: ``(file, record, problem)`` of every record that could not become a trajectory.
        first_id, first_task_id, first_label, first_render: the first trajectory, rendered as the judge
            reads it (None when nothing loaded).
        labels: label -> count over the loaded trajectories (None: unlabeled).
        label_rule: the rule that made the labels (``unlabeled`` when the mapping gives none).
        fields: every mapped field; empty: field -> records in which it resolved to nothing.
        empty_share: the share above which a field is flagged.
        filtered: records left out by ``records.filter``.
        flags: the error flag against the output text (`MapStats.flags`).
        leaks: ``(what, token) -> (records, first id)`` of what gives the label away in the render.
        predictors: the short tokens whose presence in a field predicts the label (`_Predictors`), each a dict:
            ``field``, ``token``, ``label`` (the class its presence says), ``present`` (label -> records of that
            class holding it), ``classes`` (label -> records scanned), ``predicted`` (records its presence or
            absence labels right), ``records`` (scanned), ``share`` (``predicted / records``), ``j``.
        scanned: labeled records the token scan read (at most `PREDICT_SCAN_RECORDS`).
        optional: the fields the mapping marks optional (their emptiness is reported, never a problem).
        warnings: what the data make doubtful (a constant label, an error flag that marks everything).
    """

    mapping: str
    name: str
    data: str
    records: int = 0
    unreadable: int = 0
    loaded: int = 0
    skipped: list[tuple[str, int | str | None, str]] = field(default_factory=list)
    first_id: str | None = None
    first_task_id: str | None = None
    first_label: int | None = None
    first_render: str | None = None
    labels: Counter[int | None] = field(default_factory=Counter)
    label_rule: str = "unlabeled"
    fields: list[str] = field(default_factory=list)
    empty: dict[str, Any] = field(default_factory=dict)
    empty_share: float = 0.5
    filtered: int = 0
    flags: Counter[str] = field(default_factory=Counter)
    leaks: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    predictors: list[dict[str, Any]] = field(default_factory=list)
    scanned: int = 0
    optional: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def mostly_empty(self) -> list[tuple[str, int]]:
        """``(field, records)`` of the required fields that resolved to nothing in more than `empty_share` of the
        records (an optional field never is)."""
        if not self.records:
            return []
        return [(name, n) for name, n in sorted(self.empty.items())
                if n / self.records > self.empty_share and name not in ERROR_FIELDS and name not in self.optional]

    @property
    def ok(self) -> bool:
        """True when records matched, every one loaded, no required field is mostly empty and nothing leaks the
        label (warnings are shown, and leave it True)."""
        return (self.loaded > 0 and not self.skipped and not self.mostly_empty and not self.leaks
                and not self.predictors)

    def format(self) -> str:
        """The report as text: counts, skipped records, empty fields, then the first record as the judge reads it."""
        lines = [f"mapping {self.mapping} (format {self.name!r}) on {self.data}",
                 f"records matched: {self.records}"
                 + (f" (and {self.unreadable} unreadable)" if self.unreadable else "")
                 + (f" (and {self.filtered} left out by records.filter)" if self.filtered else "")
                 + f"; loaded: {self.loaded}; skipped: {len(self.skipped)}",
                 f"label rule: {self.label_rule}; labels: " + (", ".join(
                     f"{'unlabeled' if k is None else k}={v}" for k, v in sorted(self.labels.items(), key=str))
                     or "none")]
        for file, record, problem in self.skipped[:_SHOWN_SKIPS]:
            lines.append(f"  skipped {file}, record {record}: {problem}")
        if len(self.skipped) > _SHOWN_SKIPS:
            lines.append(f"  ... and {len(self.skipped) - _SHOWN_SKIPS} more skipped")
        lines.append(f"fields empty (resolved to nothing) per {self.records} records:")
        for name in self.fields:
            n = self.empty.get(name, 0)
            share = f" ({n / self.records:.0%})" if n and self.records else ""
            flag = "  <- empty in more than {:.0%}".format(self.empty_share) \
                if self.records and n / self.records > self.empty_share else ""
            if name in ERROR_FIELDS and flag:
                flag = "  (null: the tool output's text says which results failed)"
            elif name in self.optional:
                flag = "  (optional: reported, not a problem)"
            lines.append(f"  {name}: {n}{share}{flag}")
        if self.flags.get("results"):
            f = self.flags
            lines.append(f"tool results: {f['results']}; the error flag says failed {f['flag_true']}, not failed "
                         f"{f['flag_false']}, nothing {f['flag_null']}; the output text looks like an error in "
                         f"{f['text_error']}")
        for (what, token), (count, first) in sorted(self.leaks.items()):
            lines.append(f"LEAK: {what} {token!r} is in the render of {count} record(s) (first: {first!r}): the "
                         "judge reads the label there; map it to 'hidden' or drop it from the rendered fields")
        shown: Counter[str] = Counter()
        for p in self.predictors:
            shown[p["field"]] += 1
            if shown[p["field"]] > _SHOWN_PREDICTORS:
                continue
            other = 1 - p["label"]
            lines.append(f"LEAK: the token {p['token']!r} in {p['field']} is in {p['present'][p['label']]} of "
                         f"{p['classes'][p['label']]} label-{p['label']} records and {p['present'][other]} of "
                         f"{p['classes'][other]} label-{other} records: its presence predicts the label on "
                         f"{p['predicted']} of {p['records']} ({p['share']:.0%}); the judge reads the label there: "
                         "map the field to 'hidden' or drop what gives the outcome away")
        for name, n in shown.items():
            if n > _SHOWN_PREDICTORS:
                lines.append(f"  ... and {n - _SHOWN_PREDICTORS} more tokens of {name} predict the label")
        if self.scanned and sum(self.labels[k] for k in (0, 1)) > self.scanned:
            lines.append(f"(the token scan read the first {self.scanned:,} labeled records)")
        for warning in self.warnings:
            lines.append(f"WARNING: {warning}")
        if self.first_render is None:
            lines.append("no record loaded: nothing to render")
        else:
            lines.append(f"first trajectory: id {self.first_id!r}, task {self.first_task_id!r}, "
                         f"label {self.first_label!r} (the label is not shown to the judge)")
            lines.append("--- as the judge reads it ---")
            lines.append(self.first_render)
        if not self.ok:
            lines.append("NOT OK: " + "; ".join(self._problems()))
        else:
            lines.append("OK" if not self.warnings else f"OK, with {len(self.warnings)} warning(s) (above)")
        return "\n".join(lines)

    def _problems(self) -> list[str]:
        problems = []
        if not self.loaded:
            problems.append("no trajectory loaded")
        if self.skipped:
            problems.append(f"{len(self.skipped)} records skipped")
        if self.mostly_empty:
            problems.append("mostly empty: " + ", ".join(name for name, _ in self.mostly_empty))
        if self.leaks:
            problems.append("the label leaks into the render: " + ", ".join(token for _, token in sorted(self.leaks)))
        if self.predictors:
            tokens = sorted({f"{p['token']!r} ({p['field']})" for p in self.predictors})
            problems.append("tokens predict the label: " + ", ".join(tokens[:10])
                            + (f" and {len(tokens) - 10} more" if len(tokens) > 10 else ""))
        return problems


def check_mapping(data: PathArg, mapping: Mapping | str | Path, empty_share: float = 0.5,
                  render_config: RenderConfig | None = None) -> MapCheckReport:
    """Try a mapping on data: counts, skipped records, empty fields and the first record as the judge reads it.

    Args:
        data: a data file or folder.
        mapping: a `Mapping` or a mapping file.
        empty_share: flag fields that resolved to nothing in more than this share of the records (0 to 1).
        render_config: the render's sizes (default `RenderConfig()`, what the judge reads by default).

    Returns:
        The `MapCheckReport` (``format()`` gives the text ``rubricforge map check`` prints).

    Raises:
        MappingError: the mapping file is invalid (names the key).
        TrajectoryFormatError: the data path does not exist.
        InputError: `empty_share` is not between 0 and 1.
    """
    from rubricforge_dspy.core.errors import InputError

    if not 0 <= empty_share <= 1:
        raise InputError(f"empty_share must be between 0 and 1, got {empty_share!r}")
    mapping = mapping if isinstance(mapping, Mapping) else load_mapping(mapping)
    report, stats = LoadReport(), MapStats(audit=True)
    check = MapCheckReport(mapping=mapping.file, name=mapping.name, data=str(data), empty_share=empty_share,
                           label_rule=str(mapping.label_rule or "unlabeled"), fields=mapping.field_names(),
                           optional=mapping.optional_fields())
    config = render_config or RenderConfig()
    leaks = _LeakSearch(mapping)
    predictors = _Predictors(mapping)
    for trajectory in iter_mapped(data, mapping, on_error="skip", report=report, stats=stats):
        check.labels[trajectory.label] += 1
        text = render_trajectory(trajectory, config)
        leaks.add(trajectory, text)
        predictors.add(trajectory, text)
        if check.first_render is None:
            check.first_id, check.first_task_id, check.first_label = \
                trajectory.id, trajectory.task_id, trajectory.label
            check.first_render = text
    check.records, check.loaded, check.skipped = stats.records, report.loaded, list(report.skipped)
    check.unreadable, check.filtered, check.flags = stats.unreadable, stats.filtered, stats.flags
    check.empty = dict(stats.empty)
    for name in check.empty:
        if name not in check.fields:
            check.fields.append(name)
    check.leaks = leaks.found(check.labels)
    check.predictors, check.scanned = predictors.found(), predictors.scanned
    check.warnings = _warnings(check)
    return check


def _warnings(check: MapCheckReport) -> list[str]:
    """What the data make doubtful: one label for every record, an error flag that marks (nearly) every result."""
    out = []
    labeled = {label: n for label, n in check.labels.items() if label is not None}
    if len(labeled) == 1 and sum(labeled.values()) > 1:
        (label, n), = labeled.items()
        out.append(f"every one of the {n} labeled records has label {label} (rule: {check.label_rule}): a typo in "
                   "a path or a value set labels every record alike; check the rule against a few records")
    f = check.flags
    every = f.get("results", 0) >= 3 and f["flag_true"] == f["results"]
    if every or (f.get("results", 0) >= 3 and f["flag_true"] > _FLAG_SHARE * f["results"]
                 and f["flag_true_text_error"] < _TEXT_SHARE * f["flag_true"]):
        out.append(f"the error flag marks {f['flag_true']} of {f['results']} tool results as failed, while their "
                   f"text looks like an error in {f['flag_true_text_error']}: check the error expression (a null "
                   "negated with ! is true; [!@][0] keeps a null null)")
    return out


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z0-9_]+(?:\.[0-9]+)?", text))


class _LeakSearch:
    """What gives a record's label away in its render (see the module docstring), record by record."""

    def __init__(self, mapping: Mapping):
        self.names = {name for name in (_last_name(mapping.label_field.text if mapping.label_field else None),
                                        _last_name(mapping.fields["reward"].text if "reward" in mapping.fields
                                                   else None)) if name}
        self.hits: dict[tuple[str, str], list[Any]] = {}
        self.success: dict[str, Counter[int]] = {word: Counter() for word in SUCCESS_WORDS}
        self.whole: dict[str, list[Any]] = {}
        self.per_label: Counter[int] = Counter()

    def _hit(self, what: str, token: str, ident: str) -> None:
        entry = self.hits.setdefault((what, token), [0, ident])
        entry[0] += 1

    def add(self, trajectory: Any, text: str) -> None:
        words = _words(text)
        lowered = {word.lower() for word in words}
        value = trajectory.hidden.get("label_value")
        if isinstance(value, str) and len(value) >= 3 and not value.replace(".", "").isdigit() and value in words:
            self._hit("the label field's value", value, trajectory.id)
        reward = trajectory.reward
        if isinstance(reward, float) and not reward.is_integer():
            for form in {repr(reward), f"{reward:g}"}:
                if form in words:
                    self._hit("the reward", form, trajectory.id)
        for name in self.names:
            if name in words:
                self._hit("the label's field name", name, trajectory.id)
        self.per_label[trajectory.label] += 1
        steps = {step.content.strip().lower() for step in trajectory.steps}
        for word in SUCCESS_WORDS:
            if word.lower() in lowered:
                self.success[word][trajectory.label] += 1
            if word.lower() in steps:
                self.whole.setdefault(word, [0, trajectory.id])[0] += 1

    def found(self, labels: Counter[int | None]) -> dict[tuple[str, str], tuple[int, str]]:
        leaks = {key: tuple(value) for key, value in self.hits.items()}
        positives, negatives = self.per_label.get(1, 0), self.per_label.get(0, 0)
        for word, counts in self.success.items():
            if positives and negatives:
                share_pos, share_neg = counts[1] / positives, counts[0] / negatives
                if max(share_pos, share_neg) >= 0.5 and abs(share_pos - share_neg) >= 0.5:
                    leaks[("a success word that follows the label", word)] = (counts[1] + counts[0], "")
            elif word in self.whole:
                leaks[("a success word as a whole step", word)] = tuple(self.whole[word])
        return leaks


def _last_name(text: str | None) -> str | None:
    """The last member name of a path expression (``state.terminate_reason`` -> ``terminate_reason``) when it
    names something a text would not say by chance: with an underscore or an inner capital."""
    if not text:
        return None
    name = text.split(".")[-1].strip()
    if not _IDENTIFIER.match(name):
        return None
    return name if "_" in name.strip("_") or any(c.isupper() for c in name[1:]) else None


class _Predictors:
    """The short tokens of each mapped field whose presence predicts the label (the module docstring): per
    field and token, the labeled records of each class holding it, over the first `PREDICT_SCAN_RECORDS`
    labeled records."""

    def __init__(self, mapping: Mapping):
        self.mapping = mapping
        self.counts: dict[tuple[str, str], Counter[int]] = {}
        self.classes: Counter[int] = Counter()
        self.scanned = 0

    def _field(self, step: Any, first: bool) -> str:
        """The mapped field a step of the render came from."""
        mode, kind = self.mapping.mode, step.kind
        if kind == "final_answer":
            return "final_answer" if "final_answer" in self.mapping.fields else "messages.content"
        if kind == "user" and first and "task" in self.mapping.fields:
            return "task"
        if mode == "messages":
            return "messages.tool_calls" if kind == "tool_call" else "messages.content"
        names = {"steps": {"assistant": "steps.thought", "tool_call": "steps.action",
                           "tool_result": "steps.observation"},
                 "parallel": {"assistant": "thoughts", "tool_call": "actions", "tool_result": "observations"}}
        if mode == "steps" and kind == "tool_call" and "tool" in self.mapping.step_fields:
            return "steps.tool"
        return names.get(mode, {}).get(kind, "task")

    def add(self, trajectory: Any, render: str) -> None:
        label = trajectory.label
        if label not in (0, 1) or self.scanned >= PREDICT_SCAN_RECORDS:
            return
        self.scanned += 1
        self.classes[label] += 1
        shown = _words(render)
        found: set[tuple[str, str]] = set()
        for i, step in enumerate(trajectory.steps):
            text = step.content
            if step.kind == "tool_call":
                arguments = step.arguments
                text = f"{step.tool_name or ''} " + (arguments if isinstance(arguments, str)
                                                      else json.dumps(arguments, ensure_ascii=False, default=str))
            name = self._field(step, i == 0)
            for token in _tokens(text):
                if all(word in shown for word in _TOKEN_WORD.findall(token)):  # what the render kept
                    found.add((name, token))
        for key in found:
            self.counts.setdefault(key, Counter())[label] += 1

    def found(self) -> list[dict[str, Any]]:
        positives, negatives = self.classes[1], self.classes[0]
        if min(positives, negatives) < PREDICT_MIN_CLASS:
            return []
        out: list[dict[str, Any]] = []
        for (name, token), present in self.counts.items():
            j = present[1] / positives - present[0] / negatives
            outcome = _outcome_pair(token)
            if abs(j) < PREDICT_J and not (outcome and abs(j) >= _OUTCOME_J
                                           and max(present[1] / positives, present[0] / negatives) >= 0.5):
                continue
            label = 1 if j > 0 else 0
            predicted = present[1] + negatives - present[0] if label else present[0] + positives - present[1]
            out.append({"field": name, "token": token, "label": label, "present": {1: present[1], 0: present[0]},
                        "classes": {1: positives, 0: negatives}, "predicted": predicted, "records": self.scanned,
                        "share": predicted / self.scanned, "j": round(abs(j), 4),
                        "rule": "outcome pair" if abs(j) < PREDICT_J else "token"})
        pairs = [(str(p["field"]), str(p["token"])) for p in out if not _TOKEN_WORD.fullmatch(str(p["token"]))]
        out = [p for p in out if not _TOKEN_WORD.fullmatch(str(p["token"])) or not any(  # the pair says it
            field_name == p["field"] and p["token"] in _TOKEN_WORD.findall(pair) for field_name, pair in pairs)]
        return sorted(out, key=lambda p: (-p["predicted"], p["field"], p["token"]))


def _outcome_pair(token: str) -> bool:
    """True for a ``name: value`` / ``name=value`` token whose name is an outcome word (`OUTCOME_NAMES`)."""
    match = re.match(r"([A-Za-z_][A-Za-z0-9_.-]*)(?:: |=)", token)
    return match is not None and match.group(1).lower().rsplit(".", 1)[-1] in OUTCOME_NAMES


def _tokens(text: str) -> set[str]:
    """The short tokens of a text: its words (at most `_MAX_WORD` characters) and its ``name: value`` /
    ``name=value`` pairs (``reward=1``, ``success: True``; a JSON ``"reward": 1`` reads ``reward: 1``)."""
    words = {word for word in _TOKEN_WORD.findall(text) if len(word) <= _MAX_WORD}
    pairs = {f"{name}{': ' if sep == ':' else '='}{value}" for name, sep, value in _TOKEN_PAIR.findall(text)}
    return words | pairs
