"""The documentation cannot rot: its code runs and its theory map points at real code and tests.

1. ``docs/theory.md`` maps each claim of the PAIR paper to the code implementing it and the tests
   proving it. Every dotted name there that starts with ``pairht``, ``pairht.trl`` or
   ``pairht.vllm`` must import (``importlib`` on the longest module prefix, then ``getattr``), and
   every pytest node id (``tests/...py::name`` or ``::Class::name``, optionally ``[param-id]``)
   must exist: the file, and the function defined in it (read with ``ast``, not imported). Node
   ids with a parameter id are checked once more by pytest's own collection, in one subprocess,
   so a renamed parameter fails too. Every row of the map must name at least one of each, and the
   claims the map promises to cover must all be there.
2. Every ```` ```python ```` block of ``docs/*.md`` and ``README.md`` runs with ``exec`` in a
   fresh namespace, in a temporary working directory, with a time limit of ``BLOCK_TIMEOUT``
   seconds (a documentation example must stay small). A block starting with ``>>>`` runs as a
   doctest, so its printed output is checked too.

   The one exception is a block marked *no-run*: the comment ``<!-- docs: no-run (reason) -->``
   as the last non-blank line before its fence (the reason is required), or the word
   ``no-run`` after the language on the fence line. Such a block is not skipped silently: it
   must compile, and every module and name it imports must exist.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import importlib
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
THEORY = DOCS / "theory.md"
#: Seconds one documentation block may run (pytest-timeout).
BLOCK_TIMEOUT = 30
PYTHON_LANGS = {"python", "py", "python3"}
NO_RUN_COMMENT = re.compile(r"^\s*<!--\s*docs:\s*no-run\b\s*(?P<reason>.*?)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`{]*)(?P<rest>.*)$")

#: Claims the theory map promises to cover (first column of its table must mention each).
REQUIRED_CLAIMS = (
    "Eq. (loo)",
    "Eq. (pair-kernel)",
    "Eq. (pair-average)",
    "Eq. (pair-ht)",
    "Eq. (pair-advantage)",
    "Eq. (edge-proxy)",
    "`b_i`",
    "Eqs. (convex-objective)-(budget)",
    "Theorem 1 (Pairwise representation)",
    "Theorem 2 (Design-unbiased",
    "Proposition 1 (Bias and covariance)",
    "Proposition 2 (Convex allocation surrogate)",
    'Appendix "Naive selection bias"',
    'Appendix "Design covariance", Eq. (general-covariance)',
    'Appendix "Estimated and stabilized propensities"',
    'Appendix "Fixed-size and exact-cost designs"',
    'Appendix "At least two completed vertices"',
    'appendix "Heads and calibration"',
    'Appendix "Probability optimization"',
    'Appendix "Numerical stability"',
)

CODE_NAME = re.compile(r"^(?:pairht|pairht.trl|pairht.vllm)(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
NODE_ID = re.compile(
    r"^(?P<file>tests/[A-Za-z0-9_/]+\.py)(?P<parts>(?:::[A-Za-z_][A-Za-z0-9_]*)+)"
    r"(?P<param>\[[^\]]+\])?$"
)
BACKTICKS = re.compile(r"`([^`\n]+)`")


# ------------------------------------------------------------------------ markdown parsing
@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # file name, e.g. "theory.md"
    path: Path  # the markdown file
    index: int  # 1-based among the page's python blocks (runnable or not)
    line: int  # line of the opening fence
    source: str
    no_run: bool
    reason: str

    @property
    def id(self) -> str:
        return f"{self.page}-{self.index}"


def parse_blocks(path: Path) -> list[Block]:
    """Fenced code blocks of ``path`` in the CommonMark sense (a fence closes only at a line
    of the same character, at least as long); returns the Python ones."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i, previous = 0, ""
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body, j = [], i + 1
        while j < len(lines) and not close.match(lines[j]):
            line = lines[j]
            # remove the fence's own indentation (nested in a list), never the code's
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        assert j < len(lines), f"{path.name}:{i + 1}: code fence is never closed"
        if m["lang"].lower() in PYTHON_LANGS:
            comment = NO_RUN_COMMENT.match(previous)
            info_no_run = "no-run" in m["rest"].split()
            blocks.append(
                Block(
                    page=path.name,
                    path=path,
                    index=sum(b.page == path.name for b in blocks) + 1,
                    line=i + 1,
                    source="\n".join(body) + "\n",
                    no_run=bool(comment) or info_no_run,
                    reason=comment["reason"] if comment else "",
                )
            )
        previous = lines[j] if j < len(lines) else ""
        i = j + 1
    return blocks


# The README's examples are documentation too: they run like the pages'.
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
BLOCKS = [b for page in PAGES for b in parse_blocks(page)]
RUNNABLE = [b for b in BLOCKS if not b.no_run]
NOT_RUN = [b for b in BLOCKS if b.no_run]


# ------------------------------------------------------------------------ theory map parsing
def theory_spans() -> list[str]:
    return BACKTICKS.findall(THEORY.read_text(encoding="utf-8"))


def map_rows() -> list[list[str]]:
    """Cells of the rows of the table under the heading "## The map"."""
    text = THEORY.read_text(encoding="utf-8")
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    # rows[0] is the header and rows[1] the separator; a cell never contains "|" here
    return [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows[2:]]


CODE_NAMES = sorted({s for s in theory_spans() if CODE_NAME.match(s)})
NODE_IDS = sorted({s for s in theory_spans() if NODE_ID.match(s)})


def resolve(name: str) -> object:
    """Import the longest importable module prefix of ``name``, then getattr the rest."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        module_name = ".".join(parts[:k])
        try:
            obj: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # only "this prefix is not a module" may fall through, not a broken import inside it
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no importable module prefix in {name!r}")


@cache
def _test_tree(file: str) -> ast.Module:
    return ast.parse((ROOT / file).read_text(encoding="utf-8"), filename=file)


def _defines(body: list[ast.stmt], name: str) -> ast.AST | None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return node
    return None


# ------------------------------------------------------------------------ theory map tests
def test_theory_map_covers_every_promised_claim_with_code_and_tests():
    rows = map_rows()
    assert len(rows) >= len(REQUIRED_CLAIMS)
    first_column = "\n".join(r[0] for r in rows)
    missing = [c for c in REQUIRED_CLAIMS if c not in first_column]
    assert not missing, f"theory.md map lacks rows for {missing}"
    for row in rows:
        assert len(row) == 4, (
            f"map row must have 4 cells (paper, claim, code, tests); a '|' inside a cell, even "
            f"in backticks, splits it (write abs(x), ‖x‖): {row}"
        )
        code = [s for s in BACKTICKS.findall(row[2]) if CODE_NAME.match(s)]
        tests = [s for s in BACKTICKS.findall(row[3]) if NODE_ID.match(s)]
        assert code, f"map row {row[0]!r} names no code (fully qualified, in backticks)"
        assert tests, f"map row {row[0]!r} names no test node id (in backticks)"


@pytest.mark.parametrize("name", CODE_NAMES)
def test_theory_code_name_imports(name):
    resolve(name)


@pytest.mark.parametrize("node_id", NODE_IDS)
def test_theory_test_node_exists(node_id):
    m = NODE_ID.match(node_id)
    assert m is not None
    path = ROOT / m["file"]
    assert path.is_file(), f"{node_id}: no file {m['file']}"
    body: list[ast.stmt] = _test_tree(m["file"]).body
    parts = m["parts"].split("::")[1:]
    for k, part in enumerate(parts):
        node = _defines(body, part)
        assert node is not None, f"{node_id}: {part!r} is not defined in {m['file']}"
        if k < len(parts) - 1:
            assert isinstance(node, ast.ClassDef), f"{node_id}: {part!r} is not a class"
            body = node.body
    assert parts[-1].startswith("test"), f"{node_id}: pytest would not collect {parts[-1]!r}"


def test_parametrized_theory_node_ids_are_collected_by_pytest():
    with_params = [n for n in NODE_IDS if n.endswith("]")]
    own = [n for n in with_params if n.startswith("tests/test_docs.py::")]
    for node_id in own:  # this file's ids: check against its own parametrization
        name, param = node_id.split("::", 1)[1].split("[", 1)
        assert name == "test_python_block_runs", node_id
        assert param[:-1] in {b.id for b in RUNNABLE}, f"{node_id}: no such runnable block"
    others = [n for n in with_params if n not in own]
    if not others:
        return
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *others],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    collected = set(proc.stdout.split())
    missing = [n for n in others if n not in collected]
    assert proc.returncode == 0 and not missing, (
        f"pytest does not collect {missing} (exit {proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


# ------------------------------------------------------------------------ example tests
def test_blocks_were_found():
    # Guards the parser: the pages this file owns must contribute runnable examples.
    pages = {b.page for b in RUNNABLE}
    for page in ("index.md", "theory.md", "designs.md", "estimators.md", "allocation.md",
                 "verifiers.md"):
        assert page in pages, f"no runnable python block found in docs/{page}"


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
@pytest.mark.timeout(BLOCK_TIMEOUT)
def test_python_block_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    where = f"{block.path.relative_to(ROOT)}:{block.line}"
    if block.source.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block.source, {}, where, where, block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        report: list[str] = []
        runner.run(test, out=report.append)
        assert runner.failures == 0, "".join(report)
        return
    code = compile(block.source, where, "exec")
    exec(code, {"__name__": "__docs__"})


def _imported_names(tree: ast.Module) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.extend((node.module, alias.name) for alias in node.names if alias.name != "*")
    return out


@pytest.mark.parametrize("block", NOT_RUN, ids=lambda b: b.id)
def test_no_run_block_compiles_and_its_imports_exist(block):
    where = f"{block.path.relative_to(ROOT)}:{block.line}"
    fence_line = block.path.read_text(encoding="utf-8").splitlines()[block.line - 1]
    marked_on_fence = "no-run" in fence_line.split()
    assert marked_on_fence or block.reason.strip("() "), (
        f"{where}: a no-run block must give its reason: <!-- docs: no-run (why) -->"
    )
    tree = ast.parse(block.source, filename=where)
    compile(tree, where, "exec")
    for module, name in _imported_names(tree):
        mod = importlib.import_module(module)
        if name is not None and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule is fine too


#: What users read says what is true now: no word of the project's own history.
HISTORY_WORDS = re.compile(r"\bissue \d+|previous release|the issue's target", re.IGNORECASE)


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: p.name)
def test_docs_speak_of_the_code_not_of_its_history(page):
    hits = [f"{page.name}:{n}: {line.strip()}"
            for n, line in enumerate(page.read_text().splitlines(), 1)
            if HISTORY_WORDS.search(line)]
    assert not hits, "\n".join(hits)
