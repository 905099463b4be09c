"""JSON log lines carry extra fields and tracebacks."""

from __future__ import annotations

import io
import json
import logging

from shared.service.logs import JsonFormatter, setup_logging


def test_json_lines_with_extra_fields_and_exception() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        setup_logging("debug", stream)
        log = logging.getLogger("test.logs")
        log.info("request %s", "done", extra={"user": "alice", "code": 201})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    assert lines[0]["msg"] == "request done"
    assert lines[0]["level"] == "info"
    assert lines[0]["logger"] == "test.logs"
    assert lines[0]["user"] == "alice"
    assert lines[0]["code"] == 201
    assert "ts" in lines[0]
    assert "args" not in lines[0]
    assert lines[1]["level"] == "error"
    assert "ValueError: boom" in lines[1]["exc"]


def test_unserialisable_extra_values_are_stringified() -> None:
    record = logging.LogRecord("x", logging.INFO, "f", 1, "m", None, None)
    record.thing = object()
    out = json.loads(JsonFormatter().format(record))
    assert out["thing"].startswith("<object object")
