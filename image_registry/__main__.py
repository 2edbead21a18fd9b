"""`python -m image_registry`: serve the store read-only on --address:--port, health and metrics apart."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path

import structlog
import uvicorn

from image_registry.server import RegistryApp
from image_registry.store import ImageStore
from services.runtime import base_parser, run, setup_logging, start_health

log = structlog.get_logger("image_registry")


def parser() -> argparse.ArgumentParser:
    p = base_parser("pyk8s-image-registry", "Serves the local image store as a read-only OCI registry mirror.")
    p.set_defaults(bind_address="127.0.0.1")
    p.add_argument("--store", type=Path, required=True, help="the OCI image layout to serve")
    p.add_argument("--address", default="127.0.0.1", help="address the registry API listens on")
    p.add_argument("--port", type=int, default=5000, help="port the registry API listens on")
    return p


async def main_async(args: argparse.Namespace) -> None:
    store = ImageStore(args.store)
    await asyncio.to_thread(store.ensure)
    config = uvicorn.Config(RegistryApp(store), host=args.address, port=args.port, loop="none", http="httptools",
                            lifespan="on", log_config=None, access_log=False, server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    # Signals belong to services.runtime.run, which cancels this task; uvicorn must not install its own.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    health = await start_health(args)
    if health is not None:
        health.add_readyz_check("serving", lambda: server.started)
        health.add_readyz_check("store", lambda: asyncio.to_thread(store.index_file.exists))
    log.info("serving images", store=str(args.store), address=f"{args.address}:{args.port}",
             images=len(await asyncio.to_thread(store.images)))
    try:
        await server.serve()
    finally:
        server.should_exit = True
        if health is not None:
            await health.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    return run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
