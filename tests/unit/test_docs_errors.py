"""The errors reference page names every error class and every error code, with the fields
each code carries, so the page cannot fall behind fencing.errors or fencing._codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fencing.errors
from fencing._codes import CODES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "errors.md"
TEXT = PAGE.read_text(encoding="utf-8")
HEADINGS = set(re.findall(r"^### (\w+)\s*$", TEXT, re.MULTILINE))
ROWS = {
    code: cells for code, cells in re.findall(r"^\| `([A-Z_]+)` \|(.*)\|\s*$", TEXT, re.MULTILINE)
}


@pytest.mark.parametrize("name", fencing.errors.__all__)
def test_every_error_class_has_a_section(name: str) -> None:
    assert name in HEADINGS, f"docs/reference/errors.md has no '### {name}' section"


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_is_in_the_table_with_its_fields(code: str) -> None:
    assert code in ROWS, f"docs/reference/errors.md has no table row for `{code}`"
    fields_cell = ROWS[code].split("|")[0]
    assert re.findall(r"`(\w+)`", fields_cell) == list(CODES[code].fields)


def test_the_table_names_no_code_that_does_not_exist() -> None:
    assert set(ROWS) <= set(CODES)


def test_every_class_named_in_the_table_exists() -> None:
    for code, cells in ROWS.items():
        raised_as = cells.split("|")[-1]
        for name in re.findall(r"`(\w+)`", raised_as):
            if name[0].isupper():
                assert name in fencing.errors.__all__, f"{code}: no class {name}"
