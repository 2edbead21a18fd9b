"""Container image machinery shared by the kubelet and the image registry: references as docker spells them."""

from services.images.reference import ImageRef, normalize_image, parse_image

__all__ = ["ImageRef", "normalize_image", "parse_image"]
