"""One line naming the extra when an integration's dependencies are missing.

Each integration subpackage (``pairht.torch``, ``pairht.rollout``, ``pairht.trl``,
``pairht.vllm``, ...) calls :func:`require` when it is imported. It only looks the modules up
(``importlib.util.find_spec``, no import), so a light submodule stays light.
"""

from __future__ import annotations

import importlib.util


def require(package: str, extra: str, *modules: str) -> None:
    """Raise ``ModuleNotFoundError`` naming ``extra`` if any of ``modules`` is not installed.

    Examples
    --------
    >>> require("pairht.core", "none", "numpy")
    >>> require("pairht.example", "example", "no_such_module_xyz")
    Traceback (most recent call last):
    ...
    ModuleNotFoundError: pairht.example needs no_such_module_xyz: pip install 'pairht[example]'
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"{package} needs {', '.join(missing)}: pip install 'pairht[{extra}]'",
            name=missing[0],
        )
