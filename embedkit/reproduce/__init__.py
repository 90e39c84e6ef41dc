"""Reproductions as data: published scores in YAML, a runner that checks them, a table for the terminal and report."""

from embedkit.reproduce.runner import Condition, load_conditions, reproduce

__all__ = ["Condition", "load_conditions", "reproduce"]
