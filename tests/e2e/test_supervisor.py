"""`pyk8s up`'s supervisor: a killed process, or ones that exit on lease loss, run again without anyone acting."""

import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.e2e.test_pyk8s_cli import pid_alive, pyk8s, up

#: How soon after a death (or etcd's return) every process must be running and ready again.
RECOVERY_LIMIT = 30.0


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Path]:
    directory = tmp_path / "state"
    yield directory
    await pyk8s("down", "--state-dir", str(directory))


async def status_rows(state_dir: Path) -> dict[str, list[str]]:
    """`pyk8s status` as {name: [pid, running, ready, restarts]}."""
    _, out, _ = await pyk8s("status", "--state-dir", str(state_dir))
    lines = out.splitlines()
    assert lines and lines[0].split() == ["NAME", "PID", "RUNNING", "READY", "RESTARTS"], out
    return {line.split()[0]: line.split()[1:] for line in lines[1:]}


def pid_of(state_dir: Path, name: str) -> int:
    return int((state_dir / "run" / f"{name}.pid").read_text())


async def all_ready(state_dir: Path) -> dict[str, list[str]] | None:
    rows = await status_rows(state_dir)
    return rows if all(r[1:3] == ["yes", "yes"] for r in rows.values()) else None


async def test_killed_scheduler_is_restarted_and_counted(cluster: Path) -> None:
    await up(cluster)
    old = pid_of(cluster, "scheduler")
    os.kill(old, signal.SIGKILL)
    killed = time.monotonic()

    async def restarted() -> list[str] | None:
        row = (await status_rows(cluster))["scheduler"]
        return row if row[0] not in ("-", str(old)) and row[1:] == ["yes", "yes", "1"] else None

    row = await eventually(restarted, limit=RECOVERY_LIMIT, interval=0.5, what="the scheduler to run again")
    print(f"scheduler back {time.monotonic() - killed:.1f}s after SIGKILL (pid {old} -> {row[0]})")
    assert not pid_alive(old)
    rows = await status_rows(cluster)
    assert all(r[3] == "0" for name, r in rows.items() if name != "scheduler"), rows


async def test_lease_holders_return_after_etcd_quorum_loss(cluster: Path) -> None:
    await up(cluster)
    etcd = pid_of(cluster, "etcd")
    holders = {name: pid_of(cluster, name) for name in ("scheduler", "controller-manager")}
    os.kill(etcd, signal.SIGSTOP)
    try:
        # Frozen etcd: no lease renewal lands, so both leaders give up and exit, as upstream's do.
        async def both_exited() -> bool:
            return not any(pid_alive(pid) for pid in holders.values())

        await eventually(both_exited, limit=60.0, interval=0.5, what="scheduler and controller-manager to exit")
    finally:
        os.kill(etcd, signal.SIGCONT)
    returned = time.monotonic()
    rows = await eventually(lambda: all_ready(cluster), limit=RECOVERY_LIMIT, interval=0.5,
                            what="every process to run and be ready after etcd's return")
    print(f"all processes ready {time.monotonic() - returned:.1f}s after etcd's return")
    for name, pid in holders.items():
        assert rows[name][0] != str(pid) and int(rows[name][3]) >= 1, rows
    assert rows["etcd"][0] == str(etcd) and rows["etcd"][3] == "0", rows
