"""The extension pages of docs/extend/ are worked examples that run: each page's python block
is under 60 lines and runs to the end in a fresh interpreter (its assertions are the checks
the page promises: exact inclusions against the support, design-unbiasedness, budget
accounting), so a registry it extends starts and ends as the package ships it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("design.md", "allocator.md")
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MAX_LINES = 60


def _block(page: str) -> str:
    blocks = BLOCK.findall((ROOT / "docs" / "extend" / page).read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"docs/extend/{page} must hold one worked example; got {len(blocks)}"
    return blocks[0]


@pytest.mark.parametrize("page", PAGES)
def test_worked_example_is_under_60_lines(page):
    lines = _block(page).rstrip("\n").splitlines()
    assert 0 < len(lines) < MAX_LINES, f"docs/extend/{page}: {len(lines)} lines"


@pytest.mark.parametrize("page", PAGES)
def test_worked_example_runs(page, tmp_path):
    script = tmp_path / f"{Path(page).stem}_example.py"
    script.write_text(_block(page) + "\nprint('example done')\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("example done"), (
        done.stdout[-3000:] + done.stderr[-3000:])


def test_pages_are_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"extend/{page}" in nav, f"mkdocs.yml's nav lacks extend/{page}"
