"""kube-controller-manager: the core control loops, each an ordinary API client."""
