"""The one registry type: names, declared capabilities, errors that list the known names, and
entries that arrive on first read from a loader module."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from pairht.registry import NoCapabilities, Registry


@dataclasses.dataclass(frozen=True)
class Caps:
    takes_size: bool = False
    design: str = "conditional_poisson"


def test_registering_by_decorator_and_by_call_keeps_order_and_capabilities():
    reg: Registry[object] = Registry("thing", Caps)

    @reg.register("a", takes_size=True)
    def a():
        return 1

    b = reg.register("b", object(), design="bernoulli")
    assert list(reg) == ["a", "b"] and len(reg) == 2 and "a" in reg and "c" not in reg
    assert reg["a"] is a and reg.get("b") is b
    assert reg.capabilities("a") == Caps(takes_size=True)
    assert reg.capabilities("b") == Caps(design="bernoulli")
    assert reg.names(takes_size=True) == ("a",)
    assert reg.names(design="conditional_poisson") == ("a",)
    assert reg.names() == ("a", "b")


def test_unknown_names_and_capabilities_raise_with_the_rule():
    reg: Registry[object] = Registry("estimator", Caps)
    reg.register("ht", object())
    with pytest.raises(ValueError, match=r"estimator must be one of \['ht'\]; got 'dr'"):
        reg.get("dr")
    with pytest.raises(ValueError, match=r"config.estimator must be one of \['ht'\]; got 3"):
        reg.check("config.estimator", 3)
    with pytest.raises(ValueError, match=r"unknown capabilities \['needs_magic'\]"):
        reg.register("x", object(), needs_magic=True)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("ht", object())
    with pytest.raises(ValueError, match=r"have no \['colour'\]"):
        reg.names(colour="red")
    with pytest.raises(ValueError, match="frozen dataclass"):
        Registry("bad", dict)
    with pytest.raises(KeyError):
        reg["dr"]


def test_unregister_removes_the_name_and_refuses_an_unknown_one():
    reg: Registry[object] = Registry("row")
    reg.register("tmp", object())
    assert reg.capabilities("tmp") == NoCapabilities()
    reg.unregister("tmp")
    assert "tmp" not in reg
    with pytest.raises(ValueError, match="row must be one of"):
        reg.unregister("tmp")


def test_loader_modules_register_on_the_first_read_only(monkeypatch):
    reg: Registry[object] = Registry("allocator", Caps, loaders=["_pairht_test_loader"])
    calls = []

    module = types.ModuleType("_pairht_test_loader")

    def load():
        calls.append(1)
        # a loader may read the registry while it registers (what is there so far)
        assert "early" in reg
        reg.register("late", object(), takes_size=True)

    reg.register("early", object())
    monkeypatch.setitem(sys.modules, "_pairht_test_loader", module)
    # importing a module already in sys.modules does not run it: do the registering here,
    # as the module body would, the first time the registry asks for it
    real_import = __import__("importlib").import_module

    def fake_import(name, *args):
        if name == "_pairht_test_loader":
            load()
            return module
        return real_import(name, *args)

    monkeypatch.setattr("pairht.registry.importlib.import_module", fake_import)
    assert not calls
    assert list(reg) == ["early", "late"]
    assert reg.names(takes_size=True) == ("late",)
    list(reg)
    assert calls == [1]
