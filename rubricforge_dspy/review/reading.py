"""What the judge read: the render configuration an item's "What the judge read" is rendered with, and why.

The text a judge read is `render_trajectory` of the trajectory under the judge's render configuration, so the
page must know that configuration, per verdict line. In order:

1. **Recorded.** `rubricforge judge --out OUT` writes ``OUT.job.json`` beside the verdict file
   (`apply.job.claim_output`): the judge's fingerprint and its parts (`judge.fingerprint.judge_parts`), among
   them ``render`` (the sizes and the render algorithm's version). A verdict line whose ``judge_fingerprint``
   is that one was judged under that render: the page renders with it, with or without ``--program``.
2. **The program.** Without a matching record, ``--program``'s own render; when the line names the program
   that judged it (``program_sha256``, the rubric's hash) and it is not this one, the page says so.
3. **Neither.** The default render (or the ``--render-tokens``/``--step-chars`` given), and the page says in
   words that this may not be the text the judge read and what to give to see it.

A ``--program`` whose fingerprint parts that a program decides (the rubric and fields, the demonstrations, the
render, the operating point) differ from the recorded ones is said on the page too, naming the parts.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rubricforge_dspy.apply.job import job_path
from rubricforge_dspy.core.errors import InputError
from rubricforge_dspy.core.files import PathArg
from rubricforge_dspy.core.terminal import terminal_safe
from rubricforge_dspy.evidence.render import RENDER_VERSION, RenderConfig

logger = logging.getLogger(__name__)

__all__ = ["Reading", "ReadingResolver", "PROGRAM_PARTS"]

PROGRAM_PARTS = ("programs", "render", "operating_point")  # the fingerprint parts a program file decides
MAX_JOB_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class Reading:
    """How an item's "What the judge read" is rendered.

    Attributes:
        render: the render configuration used.
        source: where it comes from, in words (shown on the page).
        warning: why the text shown may not be what the judge read (shown as a warning), or None.
    """

    render: RenderConfig
    source: str
    warning: str | None = None


def _sizes(render: RenderConfig) -> str:
    return f"{render.max_tokens} tokens, {render.max_step_chars} step chars"


def _render_of(parts: dict[str, Any]) -> RenderConfig:
    """The `RenderConfig` of recorded render parts (``{"max_tokens", "max_step_chars", "version"}``).

    Raises:
        InputError: the parts are not a render configuration.
    """
    names = [f.name for f in fields(RenderConfig)]
    if not isinstance(parts, dict) or any(type(parts.get(name)) is not int for name in names):
        raise InputError(f"the recorded render is not {{{', '.join(names)}: integers}}: {parts!r:.200}")
    return RenderConfig(**{name: parts[name] for name in names})


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class ReadingResolver:
    """The `Reading` of each verdict line of one verdict file (module docstring).

    Args:
        verdicts: the verdict file (its ``.job.json`` is read when present).
        program: the loaded ``--program`` judge (`judge.loading.load_judge`), or None.
        program_path: its path, as given (for the page's words).
        default: the render to use when neither is known (``--render-tokens``/``--step-chars``), or None for
            the library's default.
    """

    def __init__(self, verdicts: PathArg, program: Any = None, program_path: PathArg | None = None,
                 default: RenderConfig | None = None):
        self.verdicts = Path(verdicts)
        self.job_file = job_path(self.verdicts)
        self.default, self.default_given = default or RenderConfig(), default is not None
        self.notes: list[str] = []  # problems with the record, shown on the judge page and with each item
        self.job_sha: str | None = None
        self.job_render: RenderConfig | None = None
        self.job_version = None
        self.job_parts: dict[str, Any] | None = None
        self._read_job()
        self.program, self.program_path = program, program_path
        self.program_render: RenderConfig | None = getattr(program, "render_config", None) if program else None
        self.program_sha = getattr(program, "rubric_sha256", None) if program is not None else None
        self.program_differs: list[str] = self._compare_program()
        self._cache: dict[tuple[str | None, str | None], Reading] = {}

    def _read_job(self) -> None:
        path = self.job_file
        if not path.exists():
            return
        try:
            if not path.is_file() or path.stat().st_size > MAX_JOB_BYTES:
                raise InputError("not a regular file of at most 20 MB")
            job = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(job, dict) or not isinstance(job.get("judge_fingerprint"), str):
                raise InputError("no judge_fingerprint")
            parts = job.get("judge_parts")
            if not isinstance(parts, dict):
                raise InputError("no judge_parts")
            self.job_sha, self.job_parts = job["judge_fingerprint"], parts
            if parts.get("render") is not None:
                self.job_render = _render_of(parts["render"])
                self.job_version = parts["render"].get("version")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, InputError) as error:
            self.job_sha = self.job_parts = self.job_render = None
            self.notes.append(f"{terminal_safe(path)}: not a readable judge record ({terminal_safe(error)}); the "
                              "render the judge used is taken from --program, if given")
            logger.warning("review: %s", self.notes[-1])

    def _compare_program(self) -> list[str]:
        """The program-decided fingerprint parts in which --program differs from the recorded judge."""
        if self.program is None or self.job_parts is None:
            return []
        from rubricforge_dspy.judge.fingerprint import judge_parts

        mine = judge_parts(self.program, None)
        return [name for name in PROGRAM_PARTS
                if name in self.job_parts and _canonical(mine.get(name)) != _canonical(self.job_parts.get(name))]

    def for_line(self, record: dict[str, Any]) -> Reading:
        """The `Reading` of one verdict line."""
        fingerprint, program_sha = record.get("judge_fingerprint"), record.get("program_sha256")
        key = (fingerprint if isinstance(fingerprint, str) else None, program_sha if isinstance(program_sha, str)
               else None)
        if key not in self._cache:
            self._cache[key] = self._resolve(*key)
        return self._cache[key]

    def _program_name(self) -> str:
        return f"--program {terminal_safe(self.program_path)}"

    def _resolve(self, fingerprint: str | None, program_sha: str | None) -> Reading:
        render = self.job_render
        if fingerprint is not None and fingerprint == self.job_sha and render is not None:  # recorded
            source = (f"the judge's own render, recorded with this verdict's judge fingerprint in "
                      f"{terminal_safe(self.job_file.name)} ({_sizes(render)})")
            warnings = []
            if self.job_version is not None and self.job_version != RENDER_VERSION:
                warnings.append(f"the judge rendered with render algorithm version {terminal_safe(self.job_version)}"
                                f" and this package renders version {RENDER_VERSION}: the text shown may differ "
                                "from what the judge read")
            if self.program_differs:
                warnings.append(f"{self._program_name()} is not the judge that wrote this verdict: it differs from "
                                f"the recorded judge in {', '.join(self.program_differs)}; shown: the recorded "
                                "judge's render, not the --program's (the rubric, criteria and threshold on this "
                                "page are the --program's)")
            return Reading(render, source, "; ".join(warnings) or None)
        unrecorded = (f"{terminal_safe(self.job_file.name)} does not record this verdict's judge"
                      if self.job_sha is not None else f"no {terminal_safe(self.job_file.name)} beside the verdict "
                      "file records the judge's render")
        if self.program is not None and self.program_render is not None:
            render = self.program_render
            source = f"the render of {self._program_name()} ({_sizes(render)}); {unrecorded}"
            if program_sha is not None and self.program_sha is not None and program_sha != self.program_sha:
                return Reading(render, source, f"{self._program_name()} is not the program that judged this item "
                               f"(its rubric sha256 is {self.program_sha[:12]}..., the verdict line names "
                               f"{terminal_safe(program_sha[:12])}...): shown with the --program's render, which "
                               "may not be the text the judge read; give the --program that judged")
            if program_sha is None:
                return Reading(render, source, "the verdict line does not name the program that judged it "
                               "(no program_sha256): the text shown is what the judge read only if it judged with "
                               f"{self._program_name()} and its own render")
            return Reading(render, source)
        given = "the --render-tokens/--step-chars given" if self.default_given else "the default render"
        if self.program is not None:
            why = f"{self._program_name()} has no render of its own"
        else:
            why = "no --program was given"
        return Reading(self.default, f"{given} ({_sizes(self.default)})",
                       f"the text the judge read is not known: {why} and {unrecorded}. Shown instead: the trajectory "
                       f"under {given} ({_sizes(self.default)}), which may not be the text the judge read; give "
                       "--program (the program that judged) or keep the OUT.job.json `rubricforge judge` writes "
                       "beside the verdict file")
