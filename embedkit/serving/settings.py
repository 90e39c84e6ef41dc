"""``ServeSettings``: the bounds and batching of ``embedkit serve``, checked before any heavy import."""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from embedkit.errors import EmbedkitError
from embedkit.validation import check_number, check_whole

MAX_REQUEST_BYTES = 1 << 30
_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1 << 10, "mb": 1000**2, "mib": 1 << 20, "gb": 1000**3, "gib": 1 << 30}


def parse_bytes(text: str | int, flag: str = "--max-request-bytes") -> int:
    """``1MiB``, ``512kB`` or a plain number of bytes (so a limit reads as people write it)."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise EmbedkitError(f"not a size: {text!r} (e.g. 1048576, 512KiB, 1MiB)", field=flag)
    size = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(size) or size > MAX_REQUEST_BYTES:  # int(inf) would raise OverflowError
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise EmbedkitError(f"must be at most {MAX_REQUEST_BYTES} bytes (1GiB), not {shown!r}", field=flag)
    return int(size)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses: the only hosts served to without a warning."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# (flag, attribute, minimum, maximum, integer): a bound on each knob, so a typo such as --max-wait-ms 1e9 (a server
# whose first request waits 11 days) or NaN (which compares false with everything, so no batch ever closes) is
# refused at start rather than giving a server that never answers or runs out of memory.
BOUNDS = (
    ("--port", "port", 0, 65535, True),
    ("--max-batch", "max_batch", 1, 4096, True),
    ("--max-wait-ms", "max_wait_ms", 0, 60_000, False),
    ("--max-queries", "max_queries", 1, 4096, True),
    ("--max-k", "max_k", 1, 100_000, True),
    ("--max-request-bytes", "max_request_bytes", 64, MAX_REQUEST_BYTES, True),
    ("--snippet-chars", "snippet_chars", 0, 100_000, True),
)


@dataclass(frozen=True)
class ServeSettings:
    """Where the server listens and what one request may ask; every limit keeps one client from starving others."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 64  # queries encoded and searched together, across requests
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_queries: int = 64  # queries (or embedding inputs) in one request
    max_k: int = 1000
    max_request_bytes: int = 1 << 20
    snippet_chars: int = 300

    def check(self) -> ServeSettings:
        """Refuse impossible values by their flag names (the CLI shows them as one line)."""
        if not isinstance(self.host, str) or not self.host:
            raise EmbedkitError("must not be empty", field="--host")
        for flag, name, minimum, maximum, integer in BOUNDS:
            value = getattr(self, name)
            if value is None:
                raise EmbedkitError("must be given", field=flag)
            (check_whole if integer else check_number)(value, flag, minimum=minimum, maximum=maximum)
        return self

    @property
    def limits(self) -> dict[str, int | float]:
        """What /health reports, so a client can size its requests."""
        return {
            "max_batch": self.max_batch,
            "max_wait_ms": self.max_wait_ms,
            "max_queries": self.max_queries,
            "max_k": self.max_k,
            "max_request_bytes": self.max_request_bytes,
        }
