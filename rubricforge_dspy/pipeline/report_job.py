"""``rubricforge report``: the report of a run or of verdict files, with the floor rows fit when asked.

`rubricforge_dspy.report` only reads persisted files; fitting the symptom floor and the length-only
model on labeled trajectories (``--floor-data``) is a job of its own, done here before the report is
written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.judge_names import FLOOR, LENGTH_ONLY
from rubricforge_dspy.core.trajectory import LabelRule, Trajectory
from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.judge.floor import FloorError
from rubricforge_dspy.report import write_report
from rubricforge_dspy.report.records import RunError, id_list, read_predictions
from rubricforge_dspy.trust.floor_cv import write_cv_verdicts

__all__ = ["floor_verdict_files", "refuse_unlabeled", "report_main"]


def refuse_unlabeled(trajectories: list[Trajectory]) -> None:
    """Trace formats record no outcome (``label=None``): a floor is never fit without labels."""
    unlabeled = [t for t in trajectories if t.label is None]
    if unlabeled:
        raise FloorError(f"{len(unlabeled)} of {len(trajectories)} trajectories have no label (first: "
                         f"{unlabeled[0].id} from {unlabeled[0].source.file}); give their labels with --labels "
                         "LABELS.jsonl (one {\"id\", \"label\": 0|1} per line)")


def floor_verdict_files(verdict_files: Sequence[str | Path], floor_data: PathArg | Sequence[PathArg], out_dir: Path,
                        labels: str | Path | None = None) -> list[Path]:
    """The floor's and the length-only model's verdict files for the items of `verdict_files`
    (`trust.floor_cv.write_cv_verdicts`: task-grouped cross-validation on those items of `floor_data`, the
    labeled trajectories they were judged on; or unlabeled ones with `labels` joined), written to `out_dir`."""
    paths = [Path(p) for p in verdict_files]
    if len(paths) == 1 and (paths[0].is_dir() or paths[0].name == "run.json"):
        raise RunError(f"{paths[0]}: --floor-data goes with verdict files; a protocol run directory carries its "
                       "own floor rows (predictions/floor.jsonl)")
    ids = set(read_predictions(paths[0]))
    trajectories = load_trajectories(floor_data)
    chosen = [t for t in trajectories if t.id in ids]
    missing = sorted(ids - {t.id for t in chosen})
    if missing:
        raise RunError(f"--floor-data: {len(missing)} judged id(s) are not in the data: {id_list(missing)}; give "
                       "the labeled trajectories the verdicts were made on")
    if labels is not None:
        from rubricforge_dspy.data.labels import join_labels

        chosen = join_labels(chosen, labels)
    refuse_unlabeled(chosen)
    return list(write_cv_verdicts(chosen, out_dir, names=(FLOOR, LENGTH_ONLY)).values())


def report_main(predictions: str | Path | Sequence[str | Path], out_path: str | Path,
                labels: str | Path | None = None, label_threshold: float | str | LabelRule | None = None,
                floor_data: PathArg | Sequence[PathArg] | None = None) -> Path:
    """``rubricforge report --predictions RUN/ --out RUN/report.md``, or ``--predictions a.jsonl [b.jsonl ...]
    [--floor-data LABELED]``: markdown report with figures. With `floor_data`, the floor and length-only
    rows are added to verdict files (written to ``floor_verdicts/`` next to the report). Returns the
    markdown path."""
    if floor_data is not None:
        files = [predictions] if isinstance(predictions, (str, Path)) else list(predictions)
        predictions = [*files, *floor_verdict_files(files, floor_data, Path(out_path).parent / "floor_verdicts",
                                                    labels)]
    return write_report(predictions, out_path, figures=True, labels=labels, label_threshold=label_threshold)
