"""One registry type for every extension point: designs, allocators, estimators, variants,
proxies and audit rows.

In the style of verl's ``@register_adv_est``: an entry is registered under a name with a
decorator (or a call), each registry is the only source of its names, and an unknown name
raises a ``ValueError`` listing the known ones. An entry declares what it needs and what it
gives in a frozen dataclass of *capabilities* (e.g. an allocator's ``takes_size``), read as
attributes of :meth:`Registry.capabilities`, never with ``getattr`` and a default.

A registry may name modules to import on its first read (``loaders``): entries that live in a
package which itself builds on the registry's package (the comparators register allocators)
arrive without the registry's package importing theirs at import time, so imports run one way.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class NoCapabilities:
    """Capabilities of a registry whose entries declare none."""


class Registry(Mapping[str, T], Generic[T]):
    """name -> entry, with each entry's declared capabilities.

    Parameters
    ----------
    kind : str
        What an entry is, singular (``"allocator"``): the argument name in error messages.
    capabilities : type, optional
        A frozen dataclass whose fields every entry declares (defaults where the dataclass
        gives them). ``NoCapabilities`` when omitted.
    loaders : sequence of str, optional
        Modules imported on the first read, which register further entries.

    Examples
    --------
    >>> import dataclasses
    >>> @dataclasses.dataclass(frozen=True)
    ... class Caps:
    ...     takes_size: bool = False
    >>> SHAPES: Registry[type] = Registry("shape", Caps)
    >>> @SHAPES.register("square", takes_size=True)
    ... class Square: ...
    >>> SHAPES.register("dot", object())  # doctest: +ELLIPSIS
    <object object at ...>
    >>> list(SHAPES), SHAPES.capabilities("square").takes_size
    (['square', 'dot'], True)
    >>> SHAPES.names(takes_size=True)
    ('square',)
    >>> SHAPES.get("circle")
    Traceback (most recent call last):
    ...
    ValueError: shape must be one of ['dot', 'square']; got 'circle'
    """

    def __init__(self, kind: str, capabilities: type = NoCapabilities,
                 loaders: Sequence[str] = ()) -> None:
        if not (dataclasses.is_dataclass(capabilities)
                and capabilities.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise ValueError(f"capabilities must be a frozen dataclass; got {capabilities!r}")
        self.kind = kind
        self._caps_type = capabilities
        self._entries: dict[str, T] = {}
        self._caps: dict[str, Any] = {}
        self._loaders = tuple(loaders)
        self._loaded = not self._loaders
        self._loading = False

    # ---------------------------------------------------------------- registering
    def register(self, name: str, entry: Any = None, /, **capabilities: Any) -> Any:
        """Register ``entry`` (or, with no entry, return a decorator) under ``name``.

        ``capabilities`` are the fields of the registry's capabilities dataclass; an unknown
        field or a name already taken raises ``ValueError``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string; got {name!r}")
        caps = self._make_caps(name, capabilities)

        def add(obj: Any) -> Any:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            self._caps[name] = caps
            return obj

        return add if entry is None else add(entry)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests and examples that register a temporary entry)."""
        self._load()
        self.get(name)
        del self._entries[name]
        del self._caps[name]

    def __delitem__(self, name: str) -> None:
        """``del registry[name]``: :meth:`unregister`."""
        self.unregister(name)

    def _make_caps(self, name: str, capabilities: dict[str, Any]) -> Any:
        fields = {f.name for f in dataclasses.fields(self._caps_type)}
        unknown = sorted(set(capabilities) - fields)
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: unknown capabilities {unknown}; "
                             f"{self._caps_type.__name__} declares {sorted(fields)}")
        return self._caps_type(**capabilities)

    # ---------------------------------------------------------------- reading
    def _load(self) -> None:
        # Import the loader modules once; an entry they register while loading is visible
        # to a read from inside them (they may look up what is already there).
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            for module in self._loaders:
                importlib.import_module(module)
            self._loaded = True
        finally:
            self._loading = False

    def get(self, name: str) -> T:  # type: ignore[override]
        """The entry registered as ``name``; ``ValueError`` listing the known names."""
        self._load()
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(f"{self.kind} must be one of {sorted(self._entries)}; got {name!r}")
        return self._entries[name]

    def capabilities(self, name: str) -> Any:
        """The declared capabilities of ``name`` (a frozen dataclass)."""
        self.get(name)
        return self._caps[name]

    def names(self, **where: Any) -> tuple[str, ...]:
        """Registered names, in registration order, whose capabilities equal ``where``."""
        self._load()
        fields = {f.name for f in dataclasses.fields(self._caps_type)}
        unknown = sorted(set(where) - fields)
        if unknown:
            raise ValueError(f"{self.kind} capabilities have no {unknown}; "
                             f"{self._caps_type.__name__} declares {sorted(fields)}")
        return tuple(n for n, c in self._caps.items()
                     if all(getattr(c, k) == v for k, v in where.items()))

    def check(self, argument: str, name: Any) -> str:
        """``name`` if registered, else ``ValueError`` naming ``argument`` and the known names."""
        self._load()
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(f"{argument} must be one of {sorted(self._entries)}; got {name!r}")
        return name

    def __getitem__(self, name: str) -> T:
        self._load()
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"


__all__ = ["NoCapabilities", "Registry"]
