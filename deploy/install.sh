#!/usr/bin/env bash
# Set up a Debian/Ubuntu machine for pyk8s: system packages, then a venv at .venv with the project
# installed editable with its test extra. Every step is skipped when already done, so running it again
# costs about a second. Needs root (or sudo) only when packages are missing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
packages=(etcd-server etcd-client containerd runc crun containernetworking-plugins iptables nftables conntrack
          busybox-static gcc libc6-dev curl iproute2 util-linux skopeo systemd
          docker.io docker-compose debootstrap)

say() { printf 'install.sh: %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        say "need root to run: $*"
        exit 1
    fi
}

find_python() {
    local candidate
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    say "pyk8s needs Python 3.11 or newer (apt-get install python3.11, or use a newer release)"
    exit 1
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

python="$(find_python)"
wanted=("${packages[@]}")
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    wanted+=("python3-venv" "python$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv")
fi

missing=()
for package in "${wanted[@]}"; do
    installed "$package" || missing+=("$package")
done

if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    as_root apt-get update -qq
    available=()
    for package in "${missing[@]}"; do
        if apt-cache show "$package" >/dev/null 2>&1; then
            available+=("$package")
        else
            say "package $package is not available on this system; skipping it"
        fi
    done
    if [ "${#available[@]}" -gt 0 ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${available[@]}"
    fi
fi

if ! command -v etcd >/dev/null && [ ! -x /usr/bin/etcd ]; then
    say "warning: no etcd binary; 'pyk8s up' then needs --etcd-servers"
fi

if ! command -v kubectl >/dev/null; then
    say "warning: kubectl is not installed; the tests that drive the cluster with kubectl will fail."
    say "  Install kubectl v1.32 from your distribution or https://kubernetes.io/docs/tasks/tools/"
fi

stamp="$venv/.pyk8s-installed"
digest="$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    "$python" -m venv "$venv"
fi
say "installing pyk8s into $venv"
"$venv/bin/python" -m pip install -q -e "$repo[test]"
echo "$digest" >"$stamp"
