"""Stage 7: reports (report.json, report.md) that record every setting that changes a score."""

from embedkit.report.environment import library_versions
from embedkit.report.writer import write_report

__all__ = ["library_versions", "write_report"]
