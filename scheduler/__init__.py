"""kube-scheduler: a queue, a cache and a framework of plugins, like upstream."""
