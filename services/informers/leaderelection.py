"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's timing and record format,
so pyk8s and upstream components can even contend for the same lease.

Expiry is judged by when *we* last saw the record change, not by its renewTime, so clock
skew between candidates does not matter (as upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import structlog

from services.client.errors import ApiError, NotFound
from services.client.rest import Client, gvr

log = structlog.get_logger(__name__)

LEASES = gvr("coordination.k8s.io/v1", "leases")
JITTER_FACTOR = 1.2


def micro_time(moment: datetime | None = None) -> str:
    """metav1.MicroTime as upstream writes it: RFC 3339 in UTC with six fractional digits."""
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for a Lease, runs `on_started_leading` while it holds it, and stops it when it doesn't."""

    def __init__(
        self,
        client: Client,
        *,
        namespace: str,
        name: str,
        identity: str,
        on_started_leading: Callable[[], Awaitable[None]],
        on_stopped_leading: Callable[[], Any] | None = None,
        on_new_leader: Callable[[str], Any] | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_on_cancel: bool = True,
    ) -> None:
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError("renew_deadline must be greater than retry_period*1.2")
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self.observed_spec: dict[str, Any] = {}
        self._observed_time = 0.0
        self._reported_leader: str | None = None
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    def is_leader(self) -> bool:
        return self.observed_spec.get("holderIdentity") == self.identity

    def get_leader(self) -> str:
        return self.observed_spec.get("holderIdentity") or ""

    async def run(self) -> None:
        """Acquire, lead until the lease cannot be renewed within renew_deadline, then return.

        Cancelling run() while leading stops the leading task and, with release_on_cancel,
        gives the lease up so another candidate takes over at once instead of after expiry.
        """
        await self._acquire()
        self._log.info("became leader")
        leading = asyncio.create_task(self._lead())
        cancelled = False
        try:
            await self._renew()
            self._log.warning("failed to renew lease, stopping leading")
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            leading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await leading
            if cancelled and self.release_on_cancel and self.is_leader():
                # A fresh task: ours is being cancelled and must not abort the release request.
                release = asyncio.create_task(self.release())
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(release)
            if self.on_stopped_leading is not None:
                result = self.on_stopped_leading()
                if inspect.isawaitable(result):
                    await result

    async def _lead(self) -> None:
        try:
            await self.on_started_leading()
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception("on_started_leading failed")

    async def _acquire(self) -> None:
        while True:
            if await self._try_bounded(self.renew_deadline):
                return
            await asyncio.sleep(self.retry_period * (1 + random.random() * JITTER_FACTOR))

    async def _renew(self) -> None:
        """Returns when a whole renew_deadline passed without a successful renewal."""
        while True:
            deadline = time.monotonic() + self.renew_deadline
            renewed = False
            while (left := deadline - time.monotonic()) > 0:
                if await self._try_bounded(left):
                    renewed = True
                    break
                await asyncio.sleep(min(self.retry_period, max(deadline - time.monotonic(), 0)))
            if not renewed:
                return
            await asyncio.sleep(self.retry_period)

    async def _try_bounded(self, limit: float) -> bool:
        try:
            async with asyncio.timeout(limit):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            return False

    def _observe(self, spec: dict[str, Any]) -> None:
        if spec != self.observed_spec:
            self.observed_spec = spec
            self._observed_time = time.monotonic()
        holder = spec.get("holderIdentity") or ""
        if holder != self._reported_leader:
            self._reported_leader = holder
            if holder and self.on_new_leader is not None:
                try:
                    self.on_new_leader(holder)
                except Exception:
                    self._log.exception("on_new_leader failed")

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; a lost compare-and-swap (409) or any API failure is just 'not this time'."""
        now = micro_time()
        desired: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": now,
            "renewTime": now,
        }
        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**desired, "leaseTransitions": 0},
            }
            try:
                created = await self.client.create(LEASES, body, self.namespace)
            except (ApiError, httpx.HTTPError) as exc:
                self._log.info("error creating lease", error=str(exc))
                return False
            self._observe(created.get("spec") or {})
            return True
        except (ApiError, httpx.HTTPError) as exc:
            self._log.info("error retrieving lease", error=str(exc))
            return False

        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        expires = self._observed_time + float(spec.get("leaseDurationSeconds") or 0)
        if holder and holder != self.identity and expires > time.monotonic():
            return False
        if holder == self.identity:
            desired["acquireTime"] = spec.get("acquireTime") or now
            desired["leaseTransitions"] = spec.get("leaseTransitions") or 0
        else:
            desired["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**spec, **desired}
        try:
            updated = await self.client.replace(LEASES, lease, self.name, self.namespace)
        except (ApiError, httpx.HTTPError) as exc:
            self._log.info("error updating lease", error=str(exc))
            return False
        self._observe(updated.get("spec") or {})
        return True

    async def release(self) -> bool:
        """Give the lease up the way ReleaseOnCancel does: empty holder, 1 s duration, fresh times."""
        if not self.is_leader():
            return True
        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
            now = micro_time()
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return True
            lease["spec"] = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": spec.get("leaseTransitions") or 0,
            }
            updated = await self.client.replace(LEASES, lease, self.name, self.namespace)
        except (ApiError, httpx.HTTPError) as exc:
            self._log.warning("failed to release lease", error=str(exc))
            return False
        self._observe(updated.get("spec") or {})
        self._log.info("released lease")
        return True
