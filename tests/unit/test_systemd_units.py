"""The systemd units of deploy/systemd: systemd itself accepts every one (`systemd-analyze verify`, with the
repository where the units expect /opt/pyk8s), each restarts always and takes its settings from the env
file `pyk8s init`/`pyk8s join` write, and there is one for every role those commands start."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy import machine
from tests.conftest import REPO

UNITS = REPO / "deploy" / "systemd"
HARDENED = ("pyk8s-etcd", "pyk8s-apiserver", "pyk8s-controller-manager", "pyk8s-scheduler", "pyk8s-dns",
            "pyk8s-proxy", "pyk8s-noderoutes")


def _unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read_string((UNITS / f"{name}.service").read_text().replace("\\\n", " "))
    return parser


def test_every_role_has_a_unit() -> None:
    names = {p.stem for p in UNITS.glob("*.service")}
    assert names == {*machine.CONTROL_PLANE_UNITS, *machine.NODE_UNITS}


def test_systemd_analyze_verify_accepts_every_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is installed by deploy/install.sh (package systemd)"
    for unit in UNITS.glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/pyk8s", str(REPO)))
    result = subprocess.run([analyze, "verify", "--man=no", *sorted(str(p) for p in tmp_path.glob("*.service"))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.parametrize("name", [*machine.CONTROL_PLANE_UNITS, *machine.NODE_UNITS])
def test_unit_restarts_and_reads_the_env_file_init_and_join_write(name: str) -> None:
    service = _unit(name)["Service"]
    assert service["Restart"] == "always"
    assert service["EnvironmentFile"] == str(machine.Layout().env(name))
    words = service["ExecStart"].split()
    assert "$ARGS" in words and words[-1] == "$EXTRA_ARGS"


@pytest.mark.parametrize("name", HARDENED)
def test_units_that_need_no_root_powers_are_hardened(name: str) -> None:
    service = _unit(name)["Service"]
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] in ("strict", "full")
    assert service["ProtectHome"] == "yes"


def test_etcd_unit_is_apart_from_debians() -> None:
    unit = _unit("pyk8s-etcd")
    assert unit["Unit"]["Conflicts"] == "etcd.service"
    assert "--data-dir=/var/lib/pyk8s/etcd" in unit["Service"]["ExecStart"].split()
