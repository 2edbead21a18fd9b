"""CSR approving controller: approves kubelet client certificate requests whose requester may have them,
as upstream's csrapproving (sarApprover) does. A request for the kube-apiserver-client-kubelet signer
with a node's subject (CN system:node:<name>, O system:nodes, client usages) is approved when a
SubjectAccessReview lets its requester `create` certificatesigningrequests/selfnodeclient (a node
renewing its own certificate) or certificatesigningrequests/nodeclient (a bootstrap token's first one).
Anything else is left to a human or another approver.
"""

from __future__ import annotations

import copy

import structlog

from controller_manager import certificates as certs
from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from services.api.meta import now_rfc3339
from services.client import Conflict, NotFound, gvr

log = structlog.get_logger(__name__)

NAME = "csrapproving"
SUBJECT_ACCESS_REVIEWS = gvr("authorization.k8s.io/v1", "subjectaccessreviews", namespaced=False)
#: (subresource the requester needs `create` on, approval message), tried in this order
RECOGNIZERS = (
    ("selfnodeclient", "Auto approving self kubelet client certificate after SubjectAccessReview."),
    ("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview."),
)


def new(ctx: ControllerContext) -> CSRApprovingController:
    return CSRApprovingController(ctx)


class CSRApprovingController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.csrs = ctx.informer(certs.CSRS)
        super().__init__(NAME, [self.csrs])
        self.csrs.add_event_handler(self._changed, lambda old, new: self._changed(new), None)

    def _changed(self, csr: certs.Obj) -> None:
        if not self._decided(csr):
            self.enqueue(csr)

    @staticmethod
    def _decided(csr: certs.Obj) -> bool:
        return bool(certs.certificate(csr)) or certs.has_condition(csr, certs.APPROVED) or certs.has_condition(
            csr, certs.DENIED)

    async def sync(self, key: str) -> None:
        csr = self.csrs.get(key)
        if csr is None or self._decided(csr):
            return
        try:
            request = certs.parse_request(csr)
        except ValueError:
            return
        if not certs.is_node_client(csr, request):
            return
        spec = csr.get("spec") or {}
        for subresource, message in RECOGNIZERS:
            if subresource == "selfnodeclient" and spec.get("username") != certs.common_name(request):
                continue
            if await self._allowed(spec, subresource):
                await self._approve(csr, message)
                return
        log.info("recognized a node client CSR but its requester may not have it approved",
                 kind="CertificateSigningRequest", name=key, requester=spec.get("username"))

    async def _allowed(self, spec: certs.Obj, subresource: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {
                "user": spec.get("username") or "", "uid": spec.get("uid") or "",
                "groups": spec.get("groups") or [], "extra": spec.get("extra") or {},
                "resourceAttributes": {"group": "certificates.k8s.io", "version": "*", "verb": "create",
                                       "resource": "certificatesigningrequests", "subresource": subresource},
            },
        }
        answer = await self.client.create(SUBJECT_ACCESS_REVIEWS, review)
        return bool((answer.get("status") or {}).get("allowed"))

    async def _approve(self, csr: certs.Obj, message: str) -> None:
        body = copy.deepcopy(csr)
        now = now_rfc3339()
        body.setdefault("status", {}).setdefault("conditions", []).append({
            "type": certs.APPROVED, "status": "True", "reason": "AutoApproved", "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now})
        try:
            await self.client.replace(certs.CSRS, body, subresource="approval")
        except (NotFound, Conflict):
            return
        log.info("approved", kind="CertificateSigningRequest", name=csr["metadata"]["name"])
