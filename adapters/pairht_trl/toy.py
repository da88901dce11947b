"""Deprecated path: this module is now :mod:`pairht_demo.toy`."""

from pairht_trl._moved import alias

alias("pairht_trl.toy", "pairht_demo.toy")
