"""Rule writers: each turns a ProxyState into one atomic ruleset and applies it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from proxy_agent.tracker import ProxyState


@dataclass
class Ruleset:
    """One rendered transaction: the text handed to the kernel tool, and counts for metrics. `split`,
    when given, returns the same change as several texts applied in order, each consistent alone."""

    text: str
    full: bool
    counts: dict[str, int] = field(default_factory=dict)
    split: Callable[[], list[str]] | None = None


class CommandError(RuntimeError):
    """A rule tool exited non-zero."""


@lru_cache(maxsize=1 << 18)
def b32_hash(text: str) -> str:
    """Upstream's chain-name hash: base32 of sha256, first 16 characters."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:16]


async def run_tool(argv: list[str], stdin: str | None = None, check: bool = True) -> tuple[int, str]:
    """Run one rule tool without blocking the loop; raise CommandError on failure when `check`."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    rc = proc.returncode or 0
    if check and rc != 0:
        raise CommandError(f"{' '.join(argv)} exited {rc}: {err.decode(errors='replace').strip()[:2000]}")
    return rc, out.decode(errors="replace")


class Backend:
    """What the proxier needs of a mode."""

    mode = ""

    def render(self, state: ProxyState, changed: set[str] | None) -> Ruleset:
        """The ruleset for `state`; `changed` limits per-Service chains to those Services (None: all)."""
        raise NotImplementedError

    async def apply(self, ruleset: Ruleset) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        """Forget what the last render assumed was written, after its apply failed."""

    async def cleanup(self) -> None:
        raise NotImplementedError
