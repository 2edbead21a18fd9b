"""Local images for nodes that cannot reach a registry: a busybox image from busybox-static and a
pause image from a few lines of C, written as docker-archive tarballs and imported into a node's
containerd (`ctr -n k8s.io images import`), like `kind load`."""

from kubelet_agent.images.build import (
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    build_busybox,
    build_pause,
    import_image,
    write_image_archive,
)

__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "build_busybox", "build_pause", "import_image", "write_image_archive"]
