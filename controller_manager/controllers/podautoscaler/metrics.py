"""Where the HPA reads resource metrics: `metrics.k8s.io/v1beta1` PodMetrics, summed over each pod's
containers, as upstream's resource metrics client does."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

import httpx

from controller_manager.controllers.podautoscaler.replicas import MetricsError, PodMetric
from services.api.meta import parse_time
from services.api.quantity import parse_quantity
from services.client import ApiError, Client
from services.runtime.durations import go_duration


class MetricsSource(Protocol):
    async def pod_metrics(self, namespace: str, selector: str, resource: str) -> dict[str, PodMetric]: ...


class ResourceMetricsClient:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def pod_metrics(self, namespace: str, selector: str, resource: str) -> dict[str, PodMetric]:
        try:
            listed = await self.client.request("GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods",
                                               params={"labelSelector": selector})
        except (ApiError, httpx.HTTPError) as exc:
            raise MetricsError(f"unable to get metrics for resource {resource}: unable to fetch metrics from "
                               f"resource metrics API: {exc}") from exc
        out: dict[str, PodMetric] = {}
        for item in listed.get("items") or ():
            containers = item.get("containers") or []
            values = [(c.get("usage") or {}).get(resource) for c in containers]
            if not containers or any(v is None for v in values):
                continue
            stamp = parse_time(item.get("timestamp"))
            if stamp is None:
                continue
            try:
                window = timedelta(seconds=go_duration(str(item.get("window") or "0s")))
            except ValueError:
                window = timedelta()
            out[item["metadata"]["name"]] = PodMetric(sum(float(parse_quantity(str(v))) for v in values), stamp,
                                                      window)
        if not out:
            raise MetricsError(f"unable to get metrics for resource {resource}: no metrics returned from resource "
                               "metrics API")
        return out
