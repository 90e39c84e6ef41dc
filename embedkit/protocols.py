"""The plain values passed between stages (a leaf: every stage uses them)."""

from __future__ import annotations

Run = dict[str, dict[str, float]]
"""Retrieved documents per query: ``{query_id: {doc_id: score}}``."""

Qrels = dict[str, dict[str, int]]
"""Relevance judgements per query: ``{query_id: {doc_id: grade}}``."""
