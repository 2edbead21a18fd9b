"""What every component's main() shares: common flags, logging, client config, the health
server, and a run() that turns SIGTERM/SIGINT into a graceful cancellation of the main task.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from services.client.config import ClientConfig, load_config
from services.runtime.health import HealthServer
from services.runtime.logging import configure_logging, level_for_verbosity

log = structlog.get_logger(__name__)


#: what Go's strconv.ParseBool accepts, which is what upstream's boolean flags take
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def boolean_flag(text: str) -> bool:
    """A boolean flag's value as upstream parses `--flag=VALUE` (use with nargs="?", const=True)."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def int_flag(minimum: int, refusal: str) -> Callable[[str], int]:
    """An integer flag of at least `minimum`; `refusal` (formatted with `value`) is the usage error below it,
    so each flag keeps its upstream wording."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'invalid integer "{text}"') from None
        if value < minimum:
            raise argparse.ArgumentTypeError(refusal.format(value=value))
        return value

    return parse


def base_parser(
    prog: str | None = None, description: str | None = None, default_secure_port: int = 0
) -> argparse.ArgumentParser:
    """The flags every non-apiserver component takes, named as upstream's."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--kubeconfig", default=None, help="path to a kubeconfig file")
    parser.add_argument("--context", default=None, help="kubeconfig context to use")
    parser.add_argument("--master", default=None, help="apiserver address; overrides the kubeconfig's server")
    parser.add_argument("--v", "-v", type=int, default=0, help="log verbosity (4 and up: debug)")
    parser.add_argument("--log-format", choices=("json", "console", "text"), default="json")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address for /healthz and /metrics")
    parser.add_argument(
        "--secure-port", type=int, default=default_secure_port, help="health port; 0 disables"
    )
    parser.add_argument("--tls-cert-file", default=None, help="serve health over TLS with this certificate")
    parser.add_argument("--tls-private-key-file", default=None)
    parser.add_argument("--kube-api-qps", type=float, default=0.0, help="client QPS limit; 0 means none")
    parser.add_argument("--kube-api-burst", type=int, default=0)
    return parser


def setup_logging(args: argparse.Namespace) -> None:
    configure_logging(level_for_verbosity(args.v), "console" if args.log_format != "json" else "json")


def client_config(args: argparse.Namespace, user_agent: str = "pyk8s") -> ClientConfig:
    config = load_config(kubeconfig=args.kubeconfig, context=args.context, master=args.master)
    config.qps = args.kube_api_qps
    config.burst = args.kube_api_burst
    config.user_agent = user_agent
    return config


async def start_health(args: argparse.Namespace) -> HealthServer | None:
    """Start the health/metrics server the flags ask for, or None when --secure-port is 0."""
    if not args.secure_port:
        return None
    context = None
    if args.tls_cert_file:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert_file, args.tls_private_key_file)
    server = HealthServer(args.bind_address, args.secure_port, ssl_context=context)
    await server.start()
    return server


def run(main: Coroutine[Any, Any, Any]) -> int:
    """Run `main` until it returns or a signal arrives; the exit code to pass to sys.exit.

    The first SIGTERM/SIGINT cancels the main task so its `finally` blocks run (releasing
    leases, closing watches); a second one exits at once, as upstream components do.
    """
    return asyncio.run(_supervise(main))


async def _supervise(main: Coroutine[Any, Any, Any]) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    stopping = False

    def on_signal(sig: signal.Signals) -> None:
        nonlocal stopping
        if stopping:
            os._exit(1)
        stopping = True
        log.info("received signal, shutting down", signal=sig.name)
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await task
        return 0
    except asyncio.CancelledError:
        if stopping:
            return 0
        raise
    except Exception:
        log.exception("fatal error")
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
