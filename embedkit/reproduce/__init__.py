"""Reproductions as data: published scores in YAML, a runner that checks them, a table for the terminal and report."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "Condition": "embedkit.reproduce.conditions",
    "load_conditions": "embedkit.reproduce.conditions",
    "reproduce": "embedkit.reproduce.runner",
}
__all__ = [
    "Condition",
    "load_conditions",
    "reproduce",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.reproduce.conditions import Condition, load_conditions
    from embedkit.reproduce.runner import reproduce
