"""kube-proxy and cluster DNS for pyk8s."""
