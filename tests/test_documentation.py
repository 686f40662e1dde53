"""The README's links lead somewhere. The pages in docs/ are checked by `mkdocs build
--strict` (make lint, make test); the README is not part of that site, so its relative
links and their anchors are checked here, the way the repository host resolves them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.support import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.MULTILINE | re.DOTALL)


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs' `toc` both spell it for plain headings."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def _relative_links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text())
    return [
        target
        for target in _LINK.findall(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def test_readme_links_resolve_to_files_and_headings() -> None:
    links = _relative_links(README)
    assert links, "the README links to its documentation pages"
    for link in links:
        path, _, anchor = link.partition("#")
        target = (README.parent / path).resolve() if path else README
        assert target.is_file(), f"README links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(target), f"README links to {link}: no such heading"


def test_readme_indexes_every_page_of_the_site() -> None:
    """Each page in mkdocs.yml's nav (the strict build refuses pages outside it) is linked
    from the README, so the front door leads to all of them."""
    nav = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"]
    pages = {page for entry in nav for page in entry.values()}
    linked = {link.partition("#")[0] for link in _relative_links(README)}
    missing = {f"docs/{page}" for page in pages if page != "index.md"} - linked
    assert not missing, f"README does not link to {sorted(missing)}"
    assert {p.name for p in DOCS.glob("*.md")} == pages
