"""structlog set-up shared by every component: JSON lines for machines, console for people."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson
import structlog


def _orjson_dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


def level_for_verbosity(v: int) -> int:
    """klog's --v mapped to levels: 0-3 info, 4 and up debug."""
    return logging.DEBUG if v >= 4 else logging.INFO


def configure_logging(level: int | str = logging.INFO, fmt: str = "json") -> None:
    """Route structlog and the standard library's logging to stderr in one format."""
    if isinstance(level, str):
        level = logging.getLevelNamesMapping()[level.upper()]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if fmt == "console":
        renderer: Any = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    else:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # httpx logs every request at INFO; that is debug-level noise for a controller.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))


def object_ref(obj: dict[str, Any]) -> dict[str, str]:
    """kind/namespace/name of an object as log fields."""
    meta = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind", ""), "name": meta.get("name", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


def bind_object(
    logger: Any = None,
    obj: dict[str, Any] | None = None,
    *,
    kind: str = "",
    namespace: str = "",
    name: str = "",
) -> Any:
    """A logger carrying the object it is about, from an object or from explicit kind/namespace/name."""
    logger = logger if logger is not None else structlog.get_logger()
    fields = object_ref(obj) if obj is not None else {}
    for key, value in (("kind", kind), ("namespace", namespace), ("name", name)):
        if value:
            fields[key] = value
    return logger.bind(**fields)
