"""Structured logging: one JSON object per line.

Both services run as Deployments whose logs are collected and queried by field; a request log
line with ``user``, ``code`` and ``duration_ms`` as fields is searchable, the same facts in prose
are not.  Fields passed with ``logger.info(..., extra={...})`` become top-level keys.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import IO, Any

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys() | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """Format records as single-line JSON with ts, level, logger, msg, extra fields and exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def setup_logging(level: int | str = logging.INFO, stream: IO[str] | None = None) -> None:
    """Route all logging to ``stream`` (stderr) as JSON lines; replaces existing root handlers."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # aiohttp's access log duplicates our request log line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
