"""The extension pages' worked examples run (docs/extend/estimator.md, framework.md): each
ends in assertions of its own claim (an estimator equal to pair-HT on a uniform fixed-size
design; a custom loop whose unselected rows get no advantage)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGES = Path(__file__).resolve().parents[2] / "docs" / "extend"


def _blocks(page: str) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", (PAGES / page).read_text(), re.S)
    assert blocks, f"no python block in docs/extend/{page}"
    return blocks


def _under_60_lines(block: str) -> bool:
    return len(block.strip().splitlines()) < 60


@pytest.mark.parametrize("page", ["estimator.md", "framework.md"])
def test_extension_page_example_runs_and_is_under_60_lines(page):
    if page == "framework.md":
        pytest.importorskip("torch")
    for block in _blocks(page):
        assert _under_60_lines(block), f"docs/extend/{page}: a block of 60 lines or more"
        exec(compile(block, str(PAGES / page), "exec"), {"__name__": "__docs__"})
