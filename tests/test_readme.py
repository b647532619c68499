"""The front door: a README a newcomer reads in two minutes, its Korean twin with the same
sections and links, and the license and citation files that agree with pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README, README_KO = ROOT / "README.md", ROOT / "README.ko.md"
SECTIONS = ["Quickstart", "The course", "Labs", "Where next", "License"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _sections(path: Path) -> list[str]:
    return [line[3:] for line in path.read_text().splitlines() if line.startswith("## ")]


def _local_links(path: Path) -> set[str]:
    links = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    return {link for link in links if "://" not in link}


def test_the_readme_is_short_and_in_the_front_doors_order():
    assert len(README.read_text()) < 12_000
    sections = _sections(README)
    assert len(sections) == len(SECTIONS)
    for section, start in zip(sections, SECTIONS, strict=True):
        assert section.startswith(start), (section, start)


def test_the_readmes_hold_no_dated_history():
    for path in (README, README_KO):
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", path.read_text()), path.name


def test_the_korean_readme_has_the_same_sections_and_links():
    assert len(_sections(README_KO)) == len(SECTIONS)
    english = _local_links(README) - {"README.ko.md"}
    korean = _local_links(README_KO) - {"README.md", "docs/glossary.ko.md"}
    assert english == korean
    for link in english | {"docs/glossary.ko.md"}:
        assert (ROOT / link.split("#")[0]).is_file(), link


def test_license_and_citation_agree_with_pyproject():
    assert PYPROJECT["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert citation["license"] == "MIT"
    assert citation["version"] == PYPROJECT["version"]
    assert citation["repository-code"] == PYPROJECT["urls"]["Repository"]
