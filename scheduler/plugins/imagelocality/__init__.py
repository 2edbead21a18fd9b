"""ImageLocality: prefer nodes that already hold the pod's images, weighted by how widely they spread."""

from scheduler.plugins.imagelocality.image_locality import ImageLocality

__all__ = ["ImageLocality"]
