"""Stage 7: reports (report.json, report.md, report.html) that record every setting that changes a score."""

from typing import TYPE_CHECKING

from embedkit._lazy import lazy_exports

_EXPORTS = {
    "write_comparison": "embedkit.report.writer",
    "write_report": "embedkit.report.writer",
}
__all__ = [
    "write_comparison",
    "write_report",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from embedkit.report.writer import write_comparison, write_report
