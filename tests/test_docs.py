"""The pages a user reads as reference: every relative link in README.md and docs/ resolves (the file, and the
section by GitHub's heading anchors), and no page reads as a lab notebook (goal words, "next run", what was tried
and dropped). Pages are read as they are committed, so a renamed section or a moved page fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
NOTEBOOK = re.compile(r"next run|not met|\bmissed\b|to be measured|[0-9.]+x goal|[0-9]+% goal|not kept|"
                      r"tried and dropped", re.I)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page: its ``<a id=...>`` tags, and its headings lowercased, punctuation but ``-`` and ``_`` dropped, spaces as
    hyphens, a repeated heading numbered ``-1``, ``-2``."""
    seen: dict[str, int] = {}
    text = FENCE.sub("", page.read_text())
    out = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))  # an explicit anchor, as the README's #train
    for line in text.splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a linked heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such section in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_pages_are_reference_not_a_notebook(page):
    hits = [f"line {n}: {line.strip()[:80]}" for n, line in enumerate(page.read_text().splitlines(), 1)
            if NOTEBOOK.search(line)]
    assert not hits, f"{page.relative_to(ROOT)}: " + "; ".join(hits)


def test_anchor_rules_match_githubs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Workers: processes, or none (`num_workers=0`)\n## Decode [and](x.md) memory\n"
                    "```\n# not a heading\n```\n## Limits\n## Limits\n")
    assert anchors(page) == {"workers-processes-or-none-num_workers0", "decode-and-memory", "limits", "limits-1"}
