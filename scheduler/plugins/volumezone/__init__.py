"""VolumeZone: a pod's bound PersistentVolumes must be in the node's zone and region."""

from scheduler.plugins.volumezone.volume_zone import ERR_REASON_CONFLICT, VolumeZone

__all__ = ["ERR_REASON_CONFLICT", "VolumeZone"]
