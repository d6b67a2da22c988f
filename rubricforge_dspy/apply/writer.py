"""The crash-safe side of a judging run: the verdict writer and the spill of the checking pass.

`VerdictWriter` appends verdict lines, one unbuffered ``write`` per line, so a SIGKILL at any moment leaves
complete lines plus at most one partial final line (repaired by the next `apply.job.read_done`); it keeps
the done index (``OUT.ids``) current. `Spill` holds the judge inputs the checking pass of `run_judge_file`
computed, so the input is parsed once. `judge_inputs` is what a judge reads of a trajectory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import orjson

from rubricforge_dspy.apply.job import DoneIndex, ResumeState, check_owned
from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.core.trajectory import Trajectory
from rubricforge_dspy.core.verdict import EvidenceRecord
from rubricforge_dspy.evidence.render import render_trajectory
from rubricforge_dspy.lm.errors import LM_ERROR_KINDS

__all__ = ["VerdictWriter", "Spill", "Spilled", "judge_inputs", "judge_reading", "plain_value"]


class VerdictWriter:
    """Appends verdict lines: one unbuffered write per line, fsync every `fsync_every` lines; each
    written id goes to the done index (`DoneIndex`, ``OUT.ids``) after its line, so the next resume
    reads the index only. The file it opens must be the one whose lock the run holds (`apply.job.check_owned`:
    not replaced since it was locked, one name)."""

    def __init__(self, path: Path, fsync_every: int, done: ResumeState, fingerprint: str | None):
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._fsync_every = fsync_every
        self._unsynced = 0
        try:
            check_owned(path, self._fd)  # the file whose lock this run holds, with one name (`apply.job`)
            with self._named():
                self._index = DoneIndex(path, done, fingerprint)
        except BaseException:
            os.close(self._fd)
            raise

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """An `OSError` of a write (a full disk: ENOSPC) names the output file: the command line's one
        line then says which file; the verdicts already written stay, and a re-run resumes after them."""
        try:
            yield
        except OSError as error:
            if error.filename is not None:
                raise
            raise OSError(error.errno, error.strerror, str(self._path)) from error

    def write(self, record: dict[str, Any]) -> None:
        data = orjson.dumps(record) + b"\n"
        view = memoryview(data)
        with self._named():
            while view:
                view = view[os.write(self._fd, view):]
            self._index.add(record["id"], len(data),
                            done=not (record["abstained"] and record.get("error_kind") in LM_ERROR_KINDS))
            self._unsynced += 1
            if self._fsync_every and self._unsynced >= self._fsync_every:
                os.fsync(self._fd)
                self._unsynced = 0

    def close(self) -> None:
        try:
            with self._named():
                self._index.close()
                os.fsync(self._fd)
        finally:
            os.close(self._fd)


def judge_inputs(judge: Any, trajectory: Trajectory | Spilled) -> dict[str, Any]:
    """What `judge` reads of `trajectory` (`BaseJudge.inputs_of`: the text, and the features of a judge that
    reads them); the rendered text for a baseline callable. A spilled item (`Spilled`) carries them."""
    if isinstance(trajectory, Spilled):
        if trajectory.inputs is None:
            raise RubricForgeError("a spilled id already done is resumed, never judged")
        return trajectory.inputs
    inputs_of = getattr(judge, "inputs_of", None)
    if inputs_of is not None:
        inputs: dict[str, Any] = inputs_of(trajectory)
        return inputs
    render = getattr(judge, "render", None)
    return {"trajectory": render(trajectory) if render is not None else render_trajectory(trajectory)}


def judge_reading(judge: Any, trajectory: Trajectory | Spilled) -> tuple[dict[str, Any], EvidenceRecord | None]:
    """`judge_inputs` and, when the judge says it (`TrajectoryJudge.reading_of`: its render's record), what of
    the trajectory those inputs show (`core.verdict.EvidenceRecord`, the verdict line's ``evidence``); None:
    unknown. One render gives both."""
    if isinstance(trajectory, Spilled):
        return judge_inputs(judge, trajectory), trajectory.evidence
    reading_of = getattr(judge, "reading_of", None)
    if reading_of is not None:
        reading: tuple[dict[str, Any], EvidenceRecord | None] = reading_of(trajectory)
        return reading
    return judge_inputs(judge, trajectory), None


class Spilled:
    """One item of the judging pass, as the checking pass spilled it (`Spill`): what the verdict line
    says of the trajectory and the judge's inputs (None for an id already done: it is skipped).
    ``steps`` is a range of the trajectory's step count (the verdict line reads its length only)."""

    __slots__ = ("id", "task_id", "domain", "agent", "steps", "label", "reward", "inputs", "evidence")

    def __init__(self, id: str, task_id: str, domain: str, agent: str, n_steps: int, label: int | None,
                 reward: float | None, inputs: dict[str, Any] | None,
                 evidence: dict[str, Any] | None = None) -> None:
        self.id, self.task_id, self.domain, self.agent = id, task_id, domain, agent
        self.steps, self.label, self.reward, self.inputs = range(n_steps), label, reward, inputs
        self.evidence = None if evidence is None else EvidenceRecord.from_dict(evidence)


_SCALARS = frozenset((str, int, float, bool, type(None)))


def plain_value(value: object) -> bool:
    """True for what comes back from JSON as it went in, type for type: a string (a rendered text), or a
    dict of strings to builtin scalars (features). Not a `Trajectory` (orjson would write a dataclass as a
    dict) nor a numpy number."""
    if type(value) is str:
        return True
    return type(value) is dict and all(type(k) is str and type(v) in _SCALARS for k, v in value.items())


class Spill:
    """The judging pass's input, written by the checking pass (`run_judge_file`): one orjson line per
    trajectory within the limit, with its judge inputs already computed (the render), in a temporary file
    beside the output (``.OUT.<random>.spill``, removed by `remove`, or by the next run on the same output
    after a kill). So the input is read, parsed and converted once, memory stays bounded, and every check
    still happens before the first LM call. It takes about as much disk as the rendered texts (of the order
    of the input's size) for the length of the run.

    A judge whose inputs are not plain data (a `FloorJudge` reads the `Trajectory` itself) cannot be
    spilled: `add` then returns False and the file is dropped (the caller reads the input again)."""

    def __init__(self, judge: Any, out_path: Path, done: set[str]) -> None:
        self.judge, self.done = judge, done
        out_path.parent.mkdir(parents=True, exist_ok=True)
        for stale in out_path.parent.glob(f".{glob.escape(out_path.name)}.*.spill"):
            stale.unlink(missing_ok=True)  # left by a killed run: spills are written under the output's lock
        fd, name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".spill", dir=out_path.parent)
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb", buffering=1 << 20)
        self.usable = True

    def add(self, trajectory: Trajectory) -> bool:
        if not self.usable:
            return False
        done = trajectory.id in self.done
        inputs, evidence = (None, None) if done else judge_reading(self.judge, trajectory)
        if inputs is not None and not all(map(plain_value, inputs.values())):
            self.remove()
            return False
        try:
            line = orjson.dumps([trajectory.id, trajectory.task_id, trajectory.domain, trajectory.agent,
                                 len(trajectory.steps), trajectory.label, trajectory.reward, inputs,
                                 None if evidence is None else evidence.to_dict()])
        except orjson.JSONEncodeError:  # e.g. a label or reward of a type JSON does not hold
            self.remove()
            return False
        self._file.write(line + b"\n")
        return True

    def items(self) -> Iterator[Spilled]:
        self._file.close()
        with self.path.open("rb") as handle:
            for line in handle:
                yield Spilled(*orjson.loads(line))

    def remove(self) -> None:
        self.usable = False
        self._file.close()
        self.path.unlink(missing_ok=True)
