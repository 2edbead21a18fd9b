"""What a container runs with: the effective security context, fsGroup ownership of volumes and the
termination message rules (file tail, log fallback, per-pod share)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kubelet_agent.cri.logfile import format_timestamp
from kubelet_agent.cri.types import ImageInfo
from kubelet_agent.pods import ownership, termination
from kubelet_agent.pods.securitycontext import effective, non_root_violation


def test_container_fields_win_and_fs_group_joins_the_supplemental_groups() -> None:
    pod_spec = {"securityContext": {"runAsUser": 1, "runAsGroup": 2, "supplementalGroups": [3], "fsGroup": 4}}
    got = effective(pod_spec, {"securityContext": {"runAsGroup": 5, "allowPrivilegeEscalation": False,
                                                   "readOnlyRootFilesystem": True}})
    assert (got.run_as_user, got.run_as_group, got.supplemental_groups) == (1, 5, [3, 4])
    assert got.no_new_privs and got.readonly_rootfs
    assert not effective({}, {"securityContext": {"allowPrivilegeEscalation": True}}).no_new_privs
    assert not effective({}, {}).no_new_privs, "only an explicit false sets no_new_privs"


def test_fs_group_gives_group_access_and_setgid_directories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir(mode=0o700)
    (tmp_path / "sub" / "f").write_text("x")
    os.chmod(tmp_path / "sub" / "f", 0o600)
    (tmp_path / "link").symlink_to("sub/f")
    gid = os.getgid() + 4321
    ownership.apply(tmp_path, gid, readonly=False)
    f, d = (tmp_path / "sub" / "f").stat(), (tmp_path / "sub").stat()
    assert f.st_gid == gid and stat.S_IMODE(f.st_mode) == 0o660
    assert d.st_gid == gid and stat.S_IMODE(d.st_mode) == 0o2770
    assert (tmp_path / "link").lstat().st_gid == gid
    assert ownership.file_mode(0o400, readonly=True) == 0o440


def test_fs_group_change_policy_on_root_mismatch(tmp_path: Path) -> None:
    """OnRootMismatch walks the volume only while its root lacks the group, its bits or setgid; Always
    walks it every time."""
    gid = os.getgid() + 4321
    (tmp_path / "data").write_text("x")
    assert ownership.set_volume_ownership(tmp_path, gid, False, "OnRootMismatch"), "root mismatch: walked"
    assert (tmp_path / "data").stat().st_gid == gid
    os.chown(tmp_path / "data", -1, os.getgid())
    assert not ownership.set_volume_ownership(tmp_path, gid, False, "OnRootMismatch"), "root matches: skipped"
    assert (tmp_path / "data").stat().st_gid == os.getgid()
    assert ownership.set_volume_ownership(tmp_path, gid, False, "Always")
    assert (tmp_path / "data").stat().st_gid == gid
    os.chmod(tmp_path, 0o755)
    assert not ownership.root_matches(tmp_path, gid, False), "no setgid, no group write"
    assert ownership.change_policy({"spec": {"securityContext": {"fsGroup": 1}}}) == "Always"


def test_message_file_keeps_its_last_4_kib(tmp_path: Path) -> None:
    path = tmp_path / "msg"
    termination.prepare(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666
    path.write_bytes(b"a" * 10 + b"b" * 4096)
    assert termination.read_message(path, None) == "b" * 4096


def test_log_fallback_takes_the_last_80_lines_and_at_most_2_kib(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    stamp = format_timestamp(1_700_000_000_000_000_000)
    log.write_text("".join(f"{stamp} stdout F line-{i}\n" for i in range(100)) + f"{stamp} stderr P tail")
    got = termination.read_message(tmp_path / "empty", log)
    assert got.split() == [f"line-{i}" for i in range(21, 100)] + ["tail"]
    log.write_text("".join(f"{stamp} stdout F {'y' * 100}\n" for _ in range(50)))
    assert len(termination.read_message(tmp_path / "empty", log)) == 2048


def test_the_pod_shares_12_kib_of_messages_over_its_containers() -> None:
    spec = {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}
    status = {"containerStatuses": [{"state": {"terminated": {"message": "m" * 5000}},
                                     "lastState": {"terminated": {"message": "short"}}}]}
    termination.cap_messages(spec, status)
    assert status["containerStatuses"][0]["state"]["terminated"]["message"] == "m" * 4096
    assert status["containerStatuses"][0]["lastState"]["terminated"]["message"] == "short"


def test_run_as_non_root_needs_a_known_non_root_user() -> None:
    strict = {"securityContext": {"runAsNonRoot": True}}
    root_image, named_image, uid_image = ImageInfo("a"), ImageInfo("b", username="app"), ImageInfo("c", uid=1000)
    assert "image will run as root" in non_root_violation(effective(strict, {}), root_image, "p", "c")
    assert "non-numeric user (app)" in non_root_violation(effective(strict, {}), named_image, "p", "c")
    assert non_root_violation(effective(strict, {}), uid_image, "p", "c") is None
    as_root = effective(strict, {"securityContext": {"runAsUser": 0}})
    assert "runAsUser breaks non-root policy" in non_root_violation(as_root, uid_image, "p", "c")
    assert non_root_violation(effective({}, {}), root_image, "p", "c") is None
