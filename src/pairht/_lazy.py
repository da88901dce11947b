"""Names a package exports but imports only on first use (PEP 562 module ``__getattr__``).

Why: ``import pairht`` must not import scipy-heavy or torch-heavy submodules that a caller
may never touch, and an integration package (``pairht.trl``) must not import TRL until one of
its names is used. Each package states ``defining module -> names`` once and gets its module
``__getattr__`` and ``__dir__`` here.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]], also: Sequence[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, loading each name on first use.

    ``exports`` maps a defining module to the names ``package`` exports from it. A loaded
    name is stored in the package's namespace, so the next lookup is a plain attribute read.
    ``also`` are names the package defines itself; ``__all__`` lists them first, then the
    exports in the order given, and ``__dir__`` lists them all, sorted.

    Examples
    --------
    >>> import types, sys
    >>> pkg = types.ModuleType("lazy_doc_example"); sys.modules[pkg.__name__] = pkg
    >>> pkg.__getattr__, pkg.__dir__, pkg.__all__ = lazy_exports(pkg.__name__,
    ...                                                         {"math": ["sqrt"]})
    >>> pkg.sqrt(4.0), "sqrt" in vars(pkg), pkg.__all__
    (2.0, True, ['sqrt'])
    >>> pkg.cbrt
    Traceback (most recent call last):
    ...
    AttributeError: module 'lazy_doc_example' has no attribute 'cbrt'
    """
    if isinstance(exports, str) or any(isinstance(v, str) for v in exports.values()):
        raise ValueError(f"exports must map a module to a sequence of names; got {exports!r}")
    where = {name: module for module, names in exports.items() for name in names}
    public = [*also, *where]
    names = sorted(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__, public
