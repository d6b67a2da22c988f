"""A toy stage kind, added as a third party would add one: this module and one registration (the last lines).

`InlineAnswers` is another tool's pass/fail answers kept inside the stage's own JSON document
(``{"kind": "toy.inline_answers", "answers": {id: passed}}``); an id it has no answer for is handed on. It reads
the trajectory's id only: nothing of the label. ``--stage toy:<answers.json>`` names one on the command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy

from rubricforge_dspy.core.verdict import Verdict
from rubricforge_dspy.evidence.render import RenderConfig
from rubricforge_dspy.judge.contract import BaseJudge, trajectory_input, verdict_prediction
from rubricforge_dspy.judge.fingerprint import digest
from rubricforge_dspy.judge.stage_kinds import StageKind, register_stage_kind

KIND = "toy.inline_answers"


class InlineAnswers(BaseJudge):
    kind = KIND
    stage_name = "toy"
    confidence_levels = (0.0, 1.0)
    needs_trajectory = True

    def __init__(self, answers: dict[str, bool]):
        super().__init__()
        self.answers = dict(answers)
        self.manifest = None

    @property
    def rubric(self) -> str:
        return ""

    @property
    def rubric_sha256(self) -> str:
        return digest({"toy": self.answers})

    def operating_point(self) -> dict[str, Any]:
        return {"toy": len(self.answers)}

    def render(self, trajectory: Any, config: RenderConfig | None = None) -> str:
        return str(getattr(trajectory_input(trajectory), "id", trajectory))

    def inputs_of(self, trajectory: Any) -> dict[str, Any]:
        return {"trajectory": trajectory}

    def forward(self, trajectory: Any) -> dspy.Prediction:
        passed = self.answers.get(str(getattr(trajectory_input(trajectory), "id", "")))
        verdict = Verdict.abstention("no answer", "escalated") if passed is None else \
            Verdict.from_answer(passed, 1.0 if passed else 0.0, "toy answer")
        return verdict_prediction(verdict, None)

    async def aforward(self, trajectory: Any) -> dspy.Prediction:
        return type(self).forward(self, trajectory)

    def save(self, path: Any, save_program: bool = False, modules_to_serialize: list[Any] | None = None) -> None:
        Path(path).write_text(json.dumps({"kind": KIND, "answers": self.answers}))

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> InlineAnswers:
        return cls({str(k): bool(v) for k, v in data["answers"].items()})

    @classmethod
    def from_file(cls, path: str) -> InlineAnswers:
        return cls.from_document(json.loads(Path(path).read_text()))


register_stage_kind(KIND, load=lambda data, path, **_: InlineAnswers.from_document(data), prefix="toy:",
                    from_spec=lambda spec, **_: InlineAnswers.from_file(spec[len("toy:"):]))


# for the entry-point test: what a third-party package's entry point names (a second kind, and two broken ones)
def entry_point_kind() -> StageKind:
    return StageKind("toy.entry_point_answers", load=lambda data, path, **_: InlineAnswers.from_document(data),
                     prefix="toyep:", from_spec=lambda spec, **_: InlineAnswers.from_file(spec[len("toyep:"):]))


def exiting_factory() -> StageKind:
    raise SystemExit(0)
