"""Process bootstrap shared by components: flags, logging, health and metrics, signals."""

from services.runtime.health import HealthServer
from services.runtime.logging import bind_object, configure_logging, object_ref
from services.runtime.process import (
    base_parser,
    boolean_flag,
    client_config,
    int_flag,
    run,
    setup_logging,
    start_health,
)

__all__ = [
    "HealthServer",
    "base_parser",
    "bind_object",
    "boolean_flag",
    "int_flag",
    "client_config",
    "configure_logging",
    "object_ref",
    "run",
    "setup_logging",
    "start_health",
]
