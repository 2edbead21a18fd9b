"""Connections into a node's network namespace, for the node agents that stay in the host's: the kubelet's probes
and hooks, kube-proxy's health-check node ports.

The kubelet stays in the host namespace (it must reach the apiserver), while pods live in the
node's namespace. A socket keeps the namespace it was created in, so one helper thread enters the
node namespace once (setns affects only the calling thread) and creates sockets there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
from concurrent.futures import ThreadPoolExecutor

CLONE_NEWNET = 0x40000000


class Dialer:
    """Opens TCP connections in `netns` (a path such as /var/run/netns/node1), or here when None."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._executor: ThreadPoolExecutor | None = None
        if netns:
            self._executor = ThreadPoolExecutor(max_workers=1, initializer=self._enter, thread_name_prefix="netns")

    def _enter(self) -> None:
        assert self.netns is not None
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(self.netns, os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {self.netns}")
        finally:
            os.close(fd)

    async def _socket(self, family: int) -> socket.socket:
        if self._executor is None:
            return socket.socket(family, socket.SOCK_STREAM)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, socket.socket, family, socket.SOCK_STREAM)

    async def listen(self, host: str, port: int, backlog: int = 128) -> socket.socket:
        """A listening TCP socket bound in the namespace, for servers that must be reached there."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if self._executor is None:
            return _bound(family, host, port, backlog)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, _bound, family, host, port, backlog)

    async def connect(self, host: str, port: int, limit: float,
                      ssl: object = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = await self._socket(family)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(limit):
                await loop.sock_connect(sock, (host, port))
                return await asyncio.open_connection(sock=sock, ssl=ssl, server_hostname=host if ssl else None)
        except BaseException:
            sock.close()
            raise

    async def forward(self, host: str, port: int, limit: float) -> tuple[asyncio.Server, int]:
        """A loopback listener relaying to host:port in the namespace, for clients that dial themselves."""
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                r2, w2 = await self.connect(host, port, limit)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, w2), _pipe(r2, writer), return_exceptions=True)

        server = await asyncio.start_server(relay, "127.0.0.1", 0)
        return server, server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def _bound(family: int, host: str, port: int, backlog: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
