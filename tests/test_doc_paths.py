"""Every repository path the documentation cites exists: README.md and docs/*.md, paths in backticks or in links
that look like files (a '/' and an extension, or a trailing '/'), URLs and placeholders left out.

A path is looked for from the repository root, from the document's folder (links are relative to it) and from
the package (`data/formats/spans.py` names `rubricforge_dspy/data/formats/spans.py`). A path that is not in the
repository on purpose (a file a command writes, an example name) is listed in `NOT_IN_THE_REPOSITORY` with
the reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_PLACEHOLDER = re.compile(r"[<>*{}$~|]|\.\.\.|…|(?<![A-Za-z])N(?![A-Za-z])|[A-Z]{3,}(?:/|\.)")

# paths the documents name that are not files of the repository, by design (what a command writes, or the
# layout a user's data have): path -> why
_RUN_OUTPUT = "a file or folder a command writes into a run directory, not a file of the repository"
_UPSTREAM = "a file of another project's repository, cited as the source of a behaviour"
NOT_IN_THE_REPOSITORY = {
    "formats/": "the subpackage of rubricforge_dspy.data the README row names (rubricforge_dspy/data/formats/)",
    "induce/": "named as the folder that does not exist (the subpackage is induction/)",
    ".rubricforge_cache/": "the cache folder a run creates",
    "artifacts/readme/": "where the README's commands write (git-ignored; the README's first command makes it)",
    "predictions/floor.jsonl": _RUN_OUTPUT, "predictions/length_only.jsonl": _RUN_OUTPUT,
    "R/floor_verdicts/": _RUN_OUTPUT, "figures/reliability.png": _RUN_OUTPUT, "figures/risk_coverage.png": _RUN_OUTPUT,
    "figures/": _RUN_OUTPUT, "gepa/candidates.json": _RUN_OUTPUT, "artifacts/agent_example/": _RUN_OUTPUT,
    "worker/src/__tests__/chatml/framework-traces/": _UPSTREAM + " (langfuse/langfuse)",
    "dspy/predict/react.py": _UPSTREAM + " (stanfordnlp/dspy)", "trl/trainer/grpo_trainer.py": _UPSTREAM + " (TRL)",
    "verl/utils/reward_score/__init__.py": _UPSTREAM + " (verl)",
    "verl/workers/reward_manager/naive.py": _UPSTREAM + " (verl)",
    "python/sglang/srt/entrypoints/http_server.py": _UPSTREAM + " (sgl-project/sglang)",
}


def _cited(text: str) -> set[str]:
    found = set()
    for span in _SPAN.findall(text):
        if not re.search(r"\s", span.strip()):
            found.add(span.strip())
    found.update(_LINK.findall(text))
    return found


def _looks_like_a_path(token: str) -> bool:
    if "://" in token or token.startswith(("/", "#", "mailto:", "-")) or "/" not in token:
        return False
    if _PLACEHOLDER.search(token):
        return False
    token = token.split("#")[0].split("::")[0]
    token = re.sub(r":\d+(?:-\d+)?$", "", token)
    return token.endswith("/") or bool(_EXTENSION.search(token))


def _clean(token: str) -> str:
    token = token.split("#")[0].split("::")[0]
    return re.sub(r":\d+(?:-\d+)?$", "", token).strip("()[],;")


def _exists(token: str, document: Path) -> bool:
    path = _clean(token)
    return any((base / path).exists() for base in (ROOT, document.parent, ROOT / "rubricforge_dspy"))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_path_exists(document):
    text = document.read_text(encoding="utf-8")
    missing = sorted(token for token in _cited(text) if _looks_like_a_path(token)
                     and _clean(token) not in NOT_IN_THE_REPOSITORY and not _exists(token, document))
    assert not missing, f"{document.relative_to(ROOT)} cites paths that do not exist: {missing}"


def test_the_check_finds_a_missing_path_and_skips_urls_and_placeholders(tmp_path):
    text = ("see `tests/no_such_test.py` and [the schema](../rubricforge_dspy/core/schemas/mapping.schema.json), "
            "`https://example.com/a.json`, `runs/<model>/overall.json`, `artifacts/RUN/report.md`, "
            "`shards/part_N.jsonl`, `evals/data/mapped/`, `a b/c.py`")
    document = ROOT / "docs" / "X.md"
    cited = sorted(t for t in _cited(text) if _looks_like_a_path(t))
    assert cited == ["../rubricforge_dspy/core/schemas/mapping.schema.json", "evals/data/mapped/",
                     "tests/no_such_test.py"]
    assert [t for t in cited if not _exists(t, document)] == ["tests/no_such_test.py"]
