"""Deprecated path: this module is now :mod:`pairht_demo.demo`."""

from pairht_trl._moved import alias

alias("pairht_trl.demo", "pairht_demo.demo")
