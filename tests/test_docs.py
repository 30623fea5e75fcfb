"""The README and docs/ as a user meets them: every relative link and
anchor resolves, the README stays a five-minute read, its headline table
is the one `slash bench report` generates from bench/results, and no page
dates a figure by when it was written ("this session", "the one before")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
#: words that date a sentence by how the project was made, not by a date and a commit
RELATIVE = re.compile(r"\b(this session|latest session|the session before|sessions? ago|earlier session|"
                      r"previous session|the one before|previous run|this round|this branch|this build|previous build|"
                      r"merged build)\b", re.I)


def _anchors(page: Path) -> set:
    from slash.bench.report import anchor

    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {anchor(m.group(1).strip()) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def _links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    bad = []
    for target in _links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no {dest.relative_to(ROOT) if ROOT in dest.parents else dest}")
        elif frag and dest.suffix == ".md" and frag not in _anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_dates_a_figure_by_how_it_was_made(page):
    hits = [f"{i}: {line.strip()[:100]}" for i, line in enumerate(page.read_text().splitlines(), 1)
            if RELATIVE.search(line)]
    assert not hits, f"{page.name}: " + "; ".join(hits)


def test_readme_is_a_five_minute_read():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_readme_headline_is_the_generated_one(tmp_path):
    from slash.bench import report

    readme = ROOT / "README.md"
    text = readme.read_text()
    copy = tmp_path / "README.md"
    copy.write_text(text)
    md, benches = report.page(str(ROOT / "bench" / "results"), str(tmp_path / "docs" / "benchmarks.md"), {})
    report.rewrite_readme(str(copy), benches, str(tmp_path / "docs" / "benchmarks.md"))
    block = lambda t: t[t.index(report.HEADLINE_START):t.index(report.HEADLINE_END)]  # noqa: E731
    assert block(copy.read_text()) == block(text), "run: slash bench report --results bench/results " \
                                                   "--page docs/benchmarks.md --readme README.md"
    assert block(text).count("](docs/benchmarks.md#") >= 4
