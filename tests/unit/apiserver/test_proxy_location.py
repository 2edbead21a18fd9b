"""How services/proxy and pods/proxy read their `[scheme:]name[:port]` and rewrite redirects."""

from __future__ import annotations

import pytest

from apiserver.endpoints.handlers.proxy import rewrite_location, split_scheme_name_port


@pytest.mark.parametrize(("ident", "split"), [
    ("web", ("", "web", "")),
    ("web:80", ("", "web", "80")),
    ("web:http", ("", "web", "http")),
    ("https:web:443", ("https", "web", "443")),
    ("https:web:", ("https", "web", "")),
    ("ftp:web:80", None),
    (":80", None),
    ("a:b:c:d", None),
])
def test_split_scheme_name_port(ident: str, split: tuple[str, str, str] | None) -> None:
    assert split_scheme_name_port(ident) == split


PREFIX = "/api/v1/namespaces/ns/services/web/proxy"


@pytest.mark.parametrize(("location", "rewritten"), [
    ("/a/b", f"{PREFIX}/a/b"),
    ("/a/b/?q=1#f", f"{PREFIX}/a/b/?q=1#f"),
    ("http://10.0.0.5:8080/x", f"{PREFIX}/x"),
    ("http://elsewhere/x", "http://elsewhere/x"),
    ("relative/x", "relative/x"),
    (f"{PREFIX}/already", f"{PREFIX}/already"),
])
def test_rewrite_location(location: str, rewritten: str) -> None:
    assert rewrite_location(location, "10.0.0.5:8080", PREFIX + "/") == rewritten
