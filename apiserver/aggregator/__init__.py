"""API aggregation (upstream's kube-aggregator): APIServices that name a Service are served by an
extension apiserver behind it; this apiserver proxies their paths, merges their discovery, and keeps
their `Available` condition."""
