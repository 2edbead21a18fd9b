"""CSR cleaner: deletes CertificateSigningRequests nobody needs any more, as upstream's csrcleaner: an
issued one once its certificate expired, an approved, denied or failed one an hour after that
condition was last updated, and a pending one a day after it was created. Upstream looks every hour;
--csr-cleaner-period (a pyk8s addition) makes that shorter.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta

import structlog
from cryptography import x509

from controller_manager import certificates as certs
from controller_manager.context import ControllerContext
from services.api.meta import parse_time
from services.client import ApiError, NotFound
from services.runtime.durations import duration_flag

log = structlog.get_logger(__name__)

NAME = "csrcleaner"
PENDING_EXPIRATION = timedelta(hours=24)
DECIDED_EXPIRATION = timedelta(hours=1)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csr-cleaner-period", type=duration_flag, default=3600.0,
                        help="how often old CertificateSigningRequests are looked for (default 1h)")


def new(ctx: ControllerContext) -> CSRCleaner:
    return CSRCleaner(ctx)


def _older_than(timestamp: str | None, age: timedelta, now: datetime) -> bool:
    when = parse_time(timestamp)
    return when is not None and when + age < now


def expired_certificate(csr: certs.Obj, now: datetime) -> bool:
    pem = certs.certificate(csr)
    if not pem:
        return False
    try:
        issued = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return False
    return any(cert.not_valid_after_utc < now for cert in issued)


def stale(csr: certs.Obj, now: datetime) -> bool:
    """Whether upstream's cleaner would delete the request now."""
    if expired_certificate(csr, now):
        return True
    decided = [certs.condition(csr, t) for t in (certs.APPROVED, certs.DENIED, certs.FAILED)]
    present = [c for c in decided if c is not None]
    if not present:
        return _older_than(csr["metadata"].get("creationTimestamp"), PENDING_EXPIRATION, now)
    return any(_older_than(c.get("lastUpdateTime"), DECIDED_EXPIRATION, now) for c in present)


class CSRCleaner:
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.csrs = ctx.informer(certs.CSRS)
        self.period = float(ctx.options.csr_cleaner_period)

    async def run(self) -> None:
        await self.csrs.wait_for_sync()
        while True:
            await self.clean()
            await asyncio.sleep(self.period)

    async def clean(self) -> None:
        now = datetime.now(UTC)
        for csr in self.csrs.list():
            if not stale(csr, now):
                continue
            name = csr["metadata"]["name"]
            try:
                await self.client.delete(certs.CSRS, name, preconditions={"uid": csr["metadata"].get("uid", "")})
            except NotFound:
                continue
            except ApiError as exc:
                log.info("could not delete old CSR", kind="CertificateSigningRequest", name=name, error=str(exc))
                continue
            log.info("deleted old CSR", kind="CertificateSigningRequest", name=name)
