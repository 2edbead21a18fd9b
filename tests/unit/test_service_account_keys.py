"""Where the apiserver's service-account keys come from: the flags, an explicit --cert-dir, or memory only."""

from pathlib import Path

import pytest

from apiserver.auth.tokens import TokenError, TokenIssuer
from services.runtime import pki


def test_signing_key_file_and_extra_verification_keys(tmp_path: Path) -> None:
    ours = tmp_path / "ours" / "sa.key"
    theirs = tmp_path / "theirs" / "sa.key"
    pki.load_or_create_service_account_key(ours, ours.with_suffix(".pub"))
    pki.load_or_create_service_account_key(theirs, theirs.with_suffix(".pub"))
    them = TokenIssuer.load(str(theirs), [], "", "", [])
    token, _ = them.issue("ns", "sa", "uid-1", None, 3600)
    alone = TokenIssuer.load(str(ours), [], "", "", [])
    with pytest.raises(TokenError, match="Signature verification failed"):
        alone.verify(token)
    rotating = TokenIssuer.load(str(ours), [str(ours.with_suffix(".pub")), str(theirs.with_suffix(".pub"))],
                                "", "", [])
    assert rotating.verify(token).username == "system:serviceaccount:ns:sa"
    mine, _ = rotating.issue("ns", "sa", "uid-1", None, 3600)
    assert rotating.verify(mine).uid == "uid-1"
    with pytest.raises(FileNotFoundError):
        TokenIssuer.load(str(tmp_path / "missing.key"), [], "", "", [])


def test_defaults_never_share_a_host_wide_key(tmp_path: Path) -> None:
    kept = TokenIssuer.load("", [], str(tmp_path / "certs"), "", [])
    assert (tmp_path / "certs" / "sa.key").exists() and (tmp_path / "certs" / "sa.pub").exists()
    again = TokenIssuer.load("", [], str(tmp_path / "certs"), "", [])
    token, _ = kept.issue("ns", "sa", "u", None, 3600)
    assert again.verify(token).name == "sa", "a key kept in --cert-dir survives a restart"
    first, second = TokenIssuer.load("", [], "", "", []), TokenIssuer.load("", [], "", "", [])
    with pytest.raises(TokenError):
        second.verify(first.issue("ns", "sa", "u", None, 3600)[0])
