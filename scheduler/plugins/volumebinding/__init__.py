"""VolumeBinding: PersistentVolumeClaims bound, matched or provisioned for the chosen node."""

from scheduler.plugins.volumebinding.volume_binding import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    VolumeBinding,
)

__all__ = [
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_NOT_ENOUGH_SPACE",
    "ERR_REASON_PV_NOT_EXIST",
    "UNBOUND_IMMEDIATE",
    "VolumeBinding",
]
