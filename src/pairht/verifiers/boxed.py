r"""Extract the final ``\boxed{...}`` (or ``\fbox{...}``) answer of a completion.

A regular expression cannot match nested braces, so this is a small scanner: find the last
``\boxed`` / ``\fbox`` command, then match its argument brace by brace, where a backslash
escapes the next character (so ``\{`` and ``\}`` in sets do not count).
"""

from __future__ import annotations

import re

__all__ = ["MalformedBoxError", "last_boxed"]

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


class MalformedBoxError(ValueError):
    """The last box is opened but never closed (unbalanced braces)."""


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` / ``\fbox{...}`` in ``text``.

    ``\boxed 5`` (argument without braces) gives the next whitespace-delimited token. The
    last command counts even if an earlier box is well formed: a final answer that is
    malformed is a failed answer, not a licence to grade an earlier one.

    Returns
    -------
    str or None
        The argument, verbatim (possibly empty), or None when there is no box.

    Raises
    ------
    MalformedBoxError
        When the last box's braces never balance.

    Examples
    --------
    >>> last_boxed(r"so \boxed{1} or rather \boxed{\frac{1}{2}}.")
    '\\frac{1}{2}'
    >>> last_boxed(r"\boxed{\{1, 2\}}")
    '\\{1, 2\\}'
    >>> last_boxed("no box") is None
    True
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str; got {type(text).__name__}")
    matches = list(_BOX_CMD.finditer(text))
    if not matches:
        return None
    pos = matches[-1].end()
    n = len(text)
    while pos < n and text[pos] in " \t\n":
        pos += 1
    if pos >= n:
        raise MalformedBoxError("the last \\boxed has no argument")
    if text[pos] != "{":
        end = pos
        while end < n and not text[end].isspace() and text[end] not in "$":
            end += 1
        return text[pos:end]
    depth = 0
    i = pos
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[pos + 1 : i]
        i += 1
    raise MalformedBoxError("the last \\boxed{ is never closed")
