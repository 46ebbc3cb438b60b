"""The documents state facts that can be checked: every README results row names a benchmark
that exists and links a RESULTS.md section that is there, every citation of a RESULTS.md
section in the code names one that is there, and local links resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SOURCES = ("feedgpu", "converters", "benchmarks", "tests", "docs", "fuzz", ".ci")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def sections() -> dict[str, str]:
    """RESULTS.md's section headings by anchor."""
    found, fenced = {}, False
    for line in RESULTS.read_text().splitlines():
        fenced ^= line.startswith("```")  # a heading inside a code block is none
        if line.startswith("## ") and not fenced:
            found[anchor(line[3:])] = line[3:].strip()
    assert not fenced, "RESULTS.md ends inside a code block"
    return found


def results_rows() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Results") :].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("| [")]


def test_every_readme_results_row_is_one_benchmark_with_a_section() -> None:
    rows = results_rows()
    assert len(rows) >= 10
    known = sections()
    for row in rows:
        links = re.findall(r"\]\(benchmarks/RESULTS\.md#([\w-]+)\)", row)
        scripts = re.findall(r"`((?:benchmarks|fuzz)/[\w./]+)`", row)
        assert len(links) == 1 and links[0] in known, row
        assert scripts and all((ROOT / s).exists() for s in scripts), row


def test_every_cited_results_section_is_there() -> None:
    headings = list(sections().values())
    cited = re.compile(r'RESULTS\.md[,:]?\s*(?:#\s*)?"([^"]+)"')
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*"):
            skip = "golden" in path.parts or path == Path(__file__)
            if path.suffix not in (".py", ".c", ".h", ".md", ".sh") or skip:
                continue
            text = " ".join(path.read_text(errors="replace").split())  # comments wrap
            for name in cited.findall(text):
                assert any(h.startswith(name) for h in headings), f"{path}: {name!r}"


def test_local_links_resolve() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), RESULTS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[\w-]+)?\)", doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name}: {target}"


def test_the_project_speaks_of_the_product() -> None:
    """No word about how the project was made (the words of its own history: stretches of
    work, their checks, issue numbers); names that TensorFlow, pytest and the profiler give
    their own objects are theirs."""
    word = re.compile(r"\b(se[s]sions?|read[-]through|review[e]rs?|issue \d+)\b", re.IGNORECASE)
    allowed = re.compile(r'ProfilerSession|tf\.Se[s]sion|scope="se[s]sion"', re.IGNORECASE)
    found = []
    for path in [ROOT / "README.md", *(p for f in SOURCES for p in (ROOT / f).rglob("*"))]:
        kinds = (".py", ".c", ".h", ".md", ".sh", ".toml", "")
        if path.is_dir() or path.suffix not in kinds or path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if word.search(line) and not allowed.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)
