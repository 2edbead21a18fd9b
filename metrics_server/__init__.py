"""The metrics server (upstream's metrics-server): scrapes every kubelet's /metrics/resource and serves
`metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics as an extension apiserver behind an APIService."""
