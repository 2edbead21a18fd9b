"""The `pyk8s` command: a local cluster (up, down, status) and kubeadm-style PKI for real machines."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path

from deploy import controlplane, local, machine, tokens
from deploy import join as join_
from deploy.bootstrap import (
    CLUSTER_CIDR,
    SERVICE_CIDR,
    PkiDir,
    apiserver_hosts,
    ensure_encryption_config,
    ensure_etcd_pki,
    ensure_pki,
    write_kubeconfig,
)
from deploy.discovery import DiscoveryError
from deploy.nodes import MAX_NODES
from deploy.state import DEFAULT_PORT, PROXY_MODES
from services.client import ApiError, ConfigError
from services.runtime.durations import go_duration
from services.runtime.hostaddress import NoHostAddress, choose_host_address


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _ttl(text: str) -> float:
    try:
        return go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _token_parsers(commands: argparse._SubParsersAction, with_state_dir: object) -> None:
    """`token create/list/delete`, kubeadm's token commands, against the admin kubeconfig."""
    token = commands.add_parser("token", help="manage bootstrap tokens, with which machines join the cluster")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")

    def with_kubeconfig(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--kubeconfig", type=Path, help="admin kubeconfig (default: the state dir's kubeconfig)")
        return with_state_dir(sub)  # type: ignore[operator, no-any-return]

    create = with_kubeconfig(token_commands.add_parser("create", help="create a bootstrap token and print it"))
    create.add_argument("token", nargs="?", default="", help="the token to create (default: a random one)")
    create.add_argument("--ttl", type=_ttl, default=24 * 3600.0,
                        help="how long until the token is deleted, e.g. 1s, 2m, 3h; 0 never (default 24h0m0s)")
    create.add_argument("--description", default="", help="a human-friendly description of the token")
    create.add_argument("--groups", type=_csv, default=list(tokens.DEFAULT_GROUPS),
                        help="extra groups the token authenticates as (default "
                             f"{','.join(tokens.DEFAULT_GROUPS)})")
    create.add_argument("--usages", type=_csv, default=list(tokens.DEFAULT_USAGES),
                        help="signing, authentication (default signing,authentication)")
    with_kubeconfig(token_commands.add_parser("list", help="list the bootstrap tokens"))
    delete = with_kubeconfig(token_commands.add_parser("delete", help="delete bootstrap tokens"))
    delete.add_argument("ids", nargs="+", metavar="ID", help="a token id or a whole token")


def _token(args: argparse.Namespace) -> int:
    kubeconfig = args.kubeconfig or args.state_dir / "kubeconfig"
    try:
        if args.token_command == "create":
            print(asyncio.run(tokens.create(kubeconfig, args.ttl, args.description, args.groups, args.usages,
                                            args.token)))
        elif args.token_command == "list":
            print(asyncio.run(tokens.list_tokens(kubeconfig)))
        else:
            print("\n".join(asyncio.run(tokens.delete(kubeconfig, args.ids))))
    except (tokens.TokenError, ApiError, ConfigError, OSError) as error:
        print(f"pyk8s token {args.token_command} failed: {error}", file=sys.stderr)
        return 1
    return 0


def _machine_parsers(commands: argparse._SubParsersAction) -> None:
    """`init` and `join`, kubeadm's commands for machines run by systemd (deploy/systemd)."""
    def with_layout(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--config-dir", type=Path, default=machine.CONFIG_DIR,
                         help=f"settings, kubeconfigs and env files (default {machine.CONFIG_DIR})")
        sub.add_argument("--pki-dir", type=Path, help="the PKI (default <config-dir>/pki)")
        sub.add_argument("--node-name", default="", help="this machine's node name (default: its hostname)")
        sub.add_argument("--pod-network-cidr", default=CLUSTER_CIDR, help=f"pod addresses (default {CLUSTER_CIDR})")
        sub.add_argument("--service-cidr", default=SERVICE_CIDR, help=f"Service addresses (default {SERVICE_CIDR})")
        return sub

    init = with_layout(commands.add_parser("init", help="make this machine the cluster's first control plane"))
    init.add_argument("--apiserver-advertise-address", default="",
                      help="the address other machines reach the API server at (default: the default route's)")
    init.add_argument("--apiserver-bind-port", type=int, default=machine.API_PORT,
                      help=f"the API server's port (default {machine.API_PORT})")
    init.add_argument("--token", default="", help="the bootstrap token to create (default: a random one)")
    init.add_argument("--token-ttl", type=_ttl, default=24 * 3600.0, help="its lifetime, 0 forever (default 24h0m0s)")
    join = with_layout(commands.add_parser("join", help="add this machine to a cluster as a node"))
    join.add_argument("address", metavar="SERVER", help="the API server's host:port, as `pyk8s init` printed it")
    join.add_argument("--token", required=True, help="a bootstrap token (pyk8s token create)")
    join.add_argument("--discovery-token-ca-cert-hash", action="append", default=[], metavar="sha256:HEX",
                      help="the cluster CA's public-key pin; repeat for several")
    join.add_argument("--node-ip", default="", help="this node's address (default: the default route's)")


def _machine(args: argparse.Namespace) -> int:
    layout = machine.Layout(config_dir=args.config_dir, pki_root=args.pki_dir)
    name = (args.node_name or socket.gethostname()).lower()
    try:
        if args.command == "init":
            address = args.apiserver_advertise_address or choose_host_address()
            opts = controlplane.InitOptions(address, name, args.token, args.token_ttl, args.pod_network_cidr,
                                            args.service_cidr, args.apiserver_bind_port)
            command = asyncio.run(controlplane.init(layout, opts, lambda line: print(line, flush=True)))
            print(f"Your pyk8s control plane has initialized successfully. As root: "
                  f"export KUBECONFIG={layout.kubeconfig('admin')}\n"
                  f"Join any number of machines by running on each as root:\n\n{command}", flush=True)
        else:
            opts = join_.JoinOptions(args.address, args.token, args.discovery_token_ca_cert_hash, name,
                                     args.node_ip or choose_host_address(), args.pod_network_cidr,
                                     args.service_cidr)
            print(asyncio.run(join_.join(layout, opts, lambda line: print(line, flush=True))), flush=True)
    except (controlplane.InitError, join_.JoinError, DiscoveryError, NoHostAddress, OSError, ValueError) as error:
        print(f"pyk8s {args.command} failed: {error}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyk8s", description="Run a pyk8s cluster.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_state_dir(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument(
            "--state-dir",
            type=Path,
            default=Path(".pyk8s"),
            help="PKI, logs, pids, etcd data (default .pyk8s)",
        )
        return sub

    up = with_state_dir(commands.add_parser("up", help="start the local cluster and write its kubeconfig"))
    up.add_argument(
        "--etcd-servers",
        type=_csv,
        help="use these etcd URLs instead of starting one (remembered; '' goes back to a local etcd)",
    )
    for flag, what in (("cafile", "CA of the --etcd-servers' certs"), ("certfile", "client cert for them"),
                       ("keyfile", "its key")):
        up.add_argument(f"--etcd-{flag}", help=f"{what} (remembered; the local etcd's own by default)")
    up.add_argument("--encryption-provider-config", metavar="FILE",
                    help="the apiserver's EncryptionConfiguration (remembered; default: one in the PKI that "
                         "encrypts Secrets with a key of its own); replicas on one etcd need the same one")
    up.add_argument("--port", type=int, help=f"apiserver secure port (default {DEFAULT_PORT}, then remembered)")
    count = up.add_mutually_exclusive_group()
    count.add_argument("--nodes", type=int,
                       help=f"real nodes: a netns, containerd, kubelet, kube-proxy each (default 1, at most "
                            f"{MAX_NODES}, then remembered)")
    count.add_argument("--no-nodes", dest="nodes", action="store_const", const=0, help="the control plane only")
    up.add_argument("--hollow-nodes", type=int, help="simulated nodes in one process (default 0, then remembered)")
    up.add_argument("--proxy-mode", choices=PROXY_MODES, help="kube-proxy mode (default iptables, then remembered)")
    up.add_argument("--service-lb-pool", metavar="CIDR|FIRST-LAST,...",
                    help="addresses for LoadBalancer Services, routed from the host to a node that answers them "
                         "(default: the nodes' own addresses; \"\" goes back to them; remembered)")
    with_state_dir(commands.add_parser("down", help="stop the local cluster and its pods, keep its data"))
    with_state_dir(commands.add_parser("status", help="show each process and whether it is ready"))

    image = commands.add_parser("image", help="manage the images the nodes pull from the cluster's registry")
    image_commands = image.add_subparsers(dest="image_command", required=True, metavar="COMMAND")
    load = with_state_dir(image_commands.add_parser(
        "load", help="put an image archive into the cluster's registry and pull it into every running node"))
    load.add_argument("archive", type=Path, metavar="FILE.tar", help="a docker-save archive or an OCI image layout")
    load.add_argument("--name", metavar="REF", help="name for an image the archive leaves unnamed")
    with_state_dir(image_commands.add_parser("ls", help="list the images the cluster's registry serves"))

    _token_parsers(commands, with_state_dir)

    _machine_parsers(commands)

    pki = commands.add_parser("pki", help="write a CA, apiserver serving cert and admin kubeconfig")
    pki.add_argument("--dir", type=Path, default=Path("/etc/pyk8s"), help="output directory (default /etc/pyk8s)")
    pki.add_argument("--hosts", type=_csv, default=[], help="extra apiserver SANs: DNS names and IPs")
    pki.add_argument("--server", default=f"https://127.0.0.1:{DEFAULT_PORT}", help="URL in admin.conf")
    return parser


def _pki(out: Path, hosts: list[str], server: str) -> str:
    """kubeadm's `init phase certs`: the serving cert also covers this machine's name and the address an
    apiserver here advertises by default (its default-route address), which pods reach it at."""
    pki_dir = PkiDir(out / "pki")
    try:
        hosts = [*hosts, choose_host_address()]
    except NoHostAddress:
        pass
    ensure_pki(pki_dir, apiserver_hosts([*hosts, socket.gethostname()]))
    ensure_etcd_pki(pki_dir, ["localhost", "127.0.0.1", "::1", *hosts, socket.gethostname()])
    ensure_encryption_config(pki_dir)
    write_kubeconfig(out / "admin.conf", server, pki_dir)
    return (f"wrote {pki_dir.root}/{{ca,apiserver,admin,apiserver-etcd-client}}.{{crt,key}}, sa.{{key,pub}}, "
            f"{pki_dir.root}/etcd/{{ca,server,peer,healthcheck-client}}.{{crt,key}}, "
            f"{pki_dir.encryption_config} and {out / 'admin.conf'}")


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        try:
            request = local.Request(port=args.port, etcd_servers=args.etcd_servers, nodes=args.nodes,
                                    hollow_nodes=args.hollow_nodes, proxy_mode=args.proxy_mode,
                                    service_lb_pool=args.service_lb_pool,
                                    etcd_cafile=args.etcd_cafile, etcd_certfile=args.etcd_certfile,
                                    etcd_keyfile=args.etcd_keyfile,
                                    encryption_provider_config=args.encryption_provider_config)
            print(asyncio.run(local.up(args.state_dir, request)))
        except local.UpError as error:
            print(f"pyk8s up failed: {error}", file=sys.stderr)
            return 1
        return 0
    if args.command == "down":
        print("\n".join(asyncio.run(local.down(args.state_dir))) or "nothing was running")
        return 0
    if args.command == "image" and args.image_command == "ls":
        print(local.format_images(local.list_images(args.state_dir)))
        return 0
    if args.command == "image":
        try:
            print("\n".join(asyncio.run(local.load_image(args.state_dir, args.archive, args.name))))
        except local.UpError as error:
            print(f"pyk8s image load failed: {error}", file=sys.stderr)
            return 1
        return 0
    if args.command == "token":
        return _token(args)
    if args.command in ("init", "join"):
        return _machine(args)
    if args.command == "status":
        rows = asyncio.run(local.status(args.state_dir))
        print(local.format_status(rows))
        return 0 if rows and all(row.ready for row in rows) else 1
    print(_pki(args.dir, args.hosts, args.server))
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
