"""What the workload tests need beyond podstatus.FakeKubelet: bind a daemon pod to the node
its required node affinity names (as the scheduler would), and run Job pods to an end.

A pod whose restartPolicy is not Always runs for `run_for` seconds, then every container exits
with the code in its `args` when that is `["exit", "<code>"]`, else 0; the pod ends Succeeded or
Failed accordingly.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.api.meta import now_rfc3339
from services.client import ApiError
from tests.integration.podstatus import PODS, FakeKubelet


def pinned_node(pod: dict[str, Any]) -> str | None:
    """The node a required matchFields term on metadata.name pins the pod to."""
    terms = (
        (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for expr in term.get("matchFields") or []:
            if expr.get("key") == "metadata.name" and expr.get("values"):
                return str(expr["values"][0])
    return None


def exit_code(container: dict[str, Any]) -> int:
    args = container.get("args") or []
    if len(args) == 2 and args[0] == "exit":
        return int(args[1])
    return 0


class WorkloadKubelet(FakeKubelet):
    def __init__(self, *args: Any, run_for: float = 0.5, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_for = run_for
        self._finishing: set[str] = set()

    async def handle(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        if not meta.get("deletionTimestamp") and not spec.get("nodeName") and self.bind:
            node = pinned_node(pod)
            if node is not None:
                if meta["uid"] in self._done or (self.nodes is not None and node not in self.nodes):
                    return
                self._done.add(meta["uid"])
                await self.client.create(
                    PODS,
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    },
                    meta["namespace"],
                    name=meta["name"],
                    subresource="binding",
                )
                return
        await super().handle(pod)
        phase = (pod.get("status") or {}).get("phase")
        if (
            (spec.get("restartPolicy") or "Always") != "Always"
            and phase == "Running"
            and not meta.get("deletionTimestamp")
            and meta["uid"] not in self._finishing
        ):
            self._finishing.add(meta["uid"])
            asyncio.get_running_loop().call_later(
                self.run_for, lambda: asyncio.ensure_future(self._finish(pod))
            )

    async def _finish(self, pod: dict[str, Any]) -> None:
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        codes = [exit_code(c) for c in containers]
        statuses = []
        for c, code in zip(containers, codes, strict=True):
            statuses.append(
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Completed" if code == 0 else "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            )
        phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        conditions = [
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
        ]
        meta = pod["metadata"]
        try:
            await self.client.patch_status(
                PODS,
                meta["name"],
                {"status": {"phase": phase, "containerStatuses": statuses, "conditions": conditions}},
                meta["namespace"],
            )
        except ApiError:
            pass
