"""`python -m deploy.supervisor`: keeps the processes `pyk8s up` started running.

The scheduler and controller-manager exit when they lose their lease, as upstream's do, and any
process may crash; on a kubeadm machine systemd restarts them (`Restart=always`), here this small
detached process does. It watches the pid file of every process the state dir enables; one whose
process is gone is started again with its recorded command line, after a delay that starts at 1 s
and doubles up to 30 s, reset once the process has run for 60 s. Each restart is counted in
DIR/run/<name>.restarts for `pyk8s status`. `pyk8s up` stops it while it changes what runs and
starts it again when done; `pyk8s down` stops it before anything else, so a stop is never undone.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from deploy.local import SUPERVISOR, enabled_specs, launch, restarts, running_pid
from deploy.state import State

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 30.0
#: A process that ran this long is healthy again: its next crash waits INITIAL_BACKOFF.
RESET_AFTER = 60.0
POLL = 0.5

log = structlog.get_logger(SUPERVISOR)


@dataclass
class Backoff:
    """When a dead process may start again: 1 s, 2 s, 4 s ... 30 s after each death."""

    delay: float = INITIAL_BACKOFF
    started: float = field(default_factory=time.monotonic)
    due: float | None = None

    def died(self, now: float) -> float:
        if now - self.started >= RESET_AFTER:
            self.delay = INITIAL_BACKOFF
        if self.due is None:
            self.due = now + self.delay
            self.delay = min(self.delay * 2, MAX_BACKOFF)
        return self.due

    def restarted(self, now: float) -> None:
        self.started, self.due = now, None


class Supervisor:
    """One pass per POLL: restart what is due, reap the children it started."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.backoff: dict[str, Backoff] = {}
        self.children: list[subprocess.Popen[bytes]] = []

    def tick(self, now: float) -> None:
        self.children = [child for child in self.children if child.poll() is None]
        for spec in enabled_specs(self.state):
            if not self.state.pid_file(spec.name).exists():
                continue
            backoff = self.backoff.setdefault(spec.name, Backoff())
            if running_pid(self.state, spec.name) is not None:
                continue
            due = backoff.died(now)
            if now < due:
                continue
            try:
                self.children.append(launch(self.state, spec))
            except Exception as error:  # noqa: BLE001 - one bad start must not stop the supervision of the rest
                log.warning("restart failed", name=spec.name, error=str(error))
                backoff.restarted(now)
                continue
            backoff.restarted(now)
            count = restarts(self.state, spec.name) + 1
            self.state.restarts_file(spec.name).write_text(f"{count}\n")
            log.info("restarted", name=spec.name, restarts=count)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.tick(time.monotonic())
            try:
                await asyncio.wait_for(stop.wait(), POLL)
            except TimeoutError:
                pass


async def _main(state_dir: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("supervising", state_dir=str(state_dir))
    await Supervisor(State.load(state_dir)).run(stop)


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deploy.supervisor", description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    asyncio.run(_main(parser.parse_args(args).state_dir))


if __name__ == "__main__":
    main()
