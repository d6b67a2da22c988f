"""Every relative link in README.md, docs/*.md, evals/*.md and the committed run reports (artifacts/) points to
a file (or folder) in the repository, and every JSON file inside the package is shipped as package data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "evals").glob("*.md")),
        *sorted((ROOT / "artifacts").rglob("*.md"))]
# [text](target) and [text](target "title"), and reference definitions `[name]: target`
INLINE = re.compile(r"\[[^\]]*\]\(\s*(?:<([^>]+)>|([^)\s]+))(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"(?m)^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
FENCE = re.compile(r"(?ms)^(```|~~~).*?^\1")


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))  # code blocks hold commands, not links
    targets = [a or b for a, b in INLINE.findall(text)] + REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^#|^//", t)]


def test_the_link_finder_finds_inline_and_reference_links(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('See [a](docs/A.md#part), [b](<b c.md>), [web](https://x.org), [top](#top) and [c][ref].\n'
                    '```\n[not](a-link.md)\n```\n[ref]: ../C.md "title"\n')
    assert relative_links(page) == ["docs/A.md#part", "b c.md", "../C.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_in_the_repository(doc):
    broken = []
    for target in relative_links(doc):
        resolved = (doc.parent / target.split("#", 1)[0]).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to what the repository does not hold: {broken}"


def test_every_json_file_of_the_package_is_package_data():
    """A table the package reads at run time (the look-alikes, the schemas) must be in the wheel."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = ROOT / "rubricforge_dspy"
    shipped = {p for name, globs in patterns.items() for g in globs
               for p in (ROOT / name.replace(".", "/")).glob(g)}
    unshipped = sorted(str(p.relative_to(ROOT)) for p in package.rglob("*.json") if p not in shipped)
    assert not unshipped, f"add these to [tool.setuptools.package-data] in pyproject.toml: {unshipped}"
