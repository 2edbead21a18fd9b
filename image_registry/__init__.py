"""A read-only OCI distribution registry that every node's containerd uses as the mirror of every
registry, like k3s's embedded mirror: images `pyk8s image load` imported, and the built-in busybox and
pause, pull from it even with `imagePullPolicy: Always`; other names fall through to the real registry."""
