"""docs/glossary.md defines every acronym the README and the docs pages use, and every
mathematical symbol the README uses: a newcomer never meets a term the glossary lacks.

A *term* of the glossary is what its tables' first column names in bold (``**HT**``,
``**`rho_ij`**``), and the first word of a bold term (``**KV cache**`` defines KV). An
*acronym* is a word of two or more capitals (digits allowed, a plural ``s`` dropped: ``MSEs``
is ``MSE``) in prose, outside code. A *symbol* is an inline code span of the README, or a word
of its diagram, shaped like the paper's notation: a letter or Greek name, optionally with a
subscript and a prime (``G``, ``G'``, ``tau``, ``pi_i``, ``rho_ij``, ``p_hat``). A symbol with
a subscript is defined by its own row or by a row of the same name with another subscript
(``pi_j`` by ``pi_i``); a bare Greek name by a row with a subscript (``pi`` by ``pi_i``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p != GLOSSARY)]

#: General computing words every reader of a Python project knows: not PAIR's vocabulary, so
#: not defined in its glossary (hardware, file formats, operating-system and build words).
EVERYDAY = frozenset({
    "AMD", "AMX", "API", "AVX2", "BLAS", "BPF", "CI", "CLI", "CPU", "CSV", "CUDA", "EPYC",
    "GB", "GEMM", "GPU", "INFO", "IPC", "JSON", "JSONL", "LAPACK", "MB", "MPI", "NCCL", "PID",
    "PNG", "RAM", "README", "SIGABRT", "WARNING", "YAML",
})

FENCED = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<lang>[^\n]*)\n(?P<body>.*?)^(?P=fence)\s*$",
                    re.S | re.M)
ACRONYM = re.compile(r"(?<![\w.\-/])([A-Z][A-Z0-9]*[A-Z][A-Z0-9]*)s?(?![\w\-/])")
GREEK = "alpha|beta|gamma|delta|epsilon|theta|lambda|mu|rho|sigma|tau|pi|phi|omega"
SYMBOL = re.compile(rf"^(?:{GREEK}|[A-Za-z])(?:_(?:[a-z]{{1,2}}|hat|min|max|pair))*'?$")
DIAGRAM_SYMBOL = re.compile(rf"\b(?:(?:{GREEK}|[A-Za-z])_[a-z]+(?:_[a-z]+)*|{GREEK})\b")


def prose(text: str) -> str:
    """Markdown without code (fenced and inline), comments, link targets and URLs."""
    text = FENCED.sub("", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"https?://\S+", "", text)


@cache
def glossary_terms() -> frozenset[str]:
    terms: set[str] = set()
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| term"):
            first = line.split("|")[1]
            for bold in re.findall(r"\*\*(.+?)\*\*", first):
                terms.add(bold.strip("`"))
                terms.update(bold.split()[:1])  # "**KV cache**" defines KV
    return frozenset(terms)


def acronyms(text: str) -> set[str]:
    return set(ACRONYM.findall(prose(text)))


def readme_symbols() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+)`", FENCED.sub("", text))
    found = {s for s in spans if SYMBOL.match(s)}
    for block in FENCED.finditer(text):
        if not block["lang"].strip():  # an unlabelled fence: the diagram
            found.update(DIAGRAM_SYMBOL.findall(block["body"]))
    return found


def defines_symbol(symbol: str, terms: frozenset[str]) -> bool:
    if symbol in terms:
        return True
    base = symbol.rstrip("'").split("_")[0]
    if "_" in symbol and symbol.split("_", 1)[1] in ("hat", "min", "max", "pair"):
        return False  # p_hat is its own symbol, not p with a subscript
    return any(re.fullmatch(rf"{re.escape(base)}_[a-z]{{1,2}}", t) for t in terms)


def test_the_glossary_has_terms_and_the_scanners_find_what_they_should():
    # Guards the parsers, so an empty scan cannot pass: known entries on each side.
    assert {"HT", "SRSWOR", "CPS", "ESS", "G'", "tau", "pi_i", "rho_ij"} <= glossary_terms()
    assert {"GRPO", "RLOO", "RLVR", "PAIR"} <= acronyms((ROOT / "README.md").read_text())
    assert {"G", "tau", "pi_i", "rho_ij", "p_hat", "c_hat"} <= readme_symbols()
    assert acronyms("MSEs of `GRPO`, see [x](HT.md) and\n```\nESS\n```\n") == {"MSE"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_acronym_is_in_the_glossary(page):
    missing = sorted(acronyms(page.read_text(encoding="utf-8")) - glossary_terms() - EVERYDAY)
    assert not missing, (f"{page.relative_to(ROOT)} uses {missing}, which docs/glossary.md does "
                         f"not define (add a row whose first column names it in bold)")


def test_every_symbol_of_the_readme_is_in_the_glossary():
    terms = glossary_terms()
    missing = sorted(s for s in readme_symbols() if not defines_symbol(s, terms))
    assert not missing, f"README.md uses the symbols {missing}, which docs/glossary.md lacks"


def test_everyday_words_are_not_glossary_terms():
    # A word in both lists would be defined twice, or excused while the glossary explains it.
    assert not EVERYDAY & glossary_terms()
