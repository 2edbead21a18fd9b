"""The `kube-system/extension-apiserver-authentication` ConfigMap, as upstream's apiserver publishes it:
the client CA, and how an extension apiserver recognises the front proxy (its CA, the names its
certificate may carry, and the headers that name the user). Extension apiservers read it to authenticate
requests the aggregator proxies to them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from apiserver.registry.store import RESTStore, WriteOptions
from services.api import errors

NAMESPACE, NAME = "kube-system", "extension-apiserver-authentication"


@dataclass
class RequestHeaderOptions:
    """--requestheader-client-ca-file, --requestheader-allowed-names and the header flags, upstream's defaults."""

    client_ca_file: str = ""
    allowed_names: list[str] = field(default_factory=list)
    username_headers: list[str] = field(default_factory=lambda: ["X-Remote-User"])
    group_headers: list[str] = field(default_factory=lambda: ["X-Remote-Group"])
    extra_headers_prefix: list[str] = field(default_factory=lambda: ["X-Remote-Extra-"])


def authentication_data(client_ca_file: str, requestheader: RequestHeaderOptions) -> dict[str, str]:
    data: dict[str, str] = {}
    if client_ca_file:
        data["client-ca-file"] = Path(client_ca_file).read_text()
    if requestheader.client_ca_file:
        data["requestheader-client-ca-file"] = Path(requestheader.client_ca_file).read_text()
        for key, values in (("requestheader-username-headers", requestheader.username_headers),
                            ("requestheader-group-headers", requestheader.group_headers),
                            ("requestheader-extra-headers-prefix", requestheader.extra_headers_prefix),
                            ("requestheader-allowed-names", requestheader.allowed_names)):
            data[key] = orjson.dumps(values).decode()
    return data


async def ensure_authentication_configmap(configmaps: RESTStore, client_ca_file: str,
                                          requestheader: RequestHeaderOptions) -> None:
    """Create or update the ConfigMap to what this apiserver's flags say; nothing when there is nothing to say."""
    data = authentication_data(client_ca_file, requestheader)
    if not data:
        return
    try:
        current = await configmaps.get(NAMESPACE, NAME)
    except errors.StatusError as exc:
        if exc.code != 404:
            raise
        try:
            await configmaps.create(NAMESPACE, {"metadata": {"name": NAME, "namespace": NAMESPACE}, "data": data},
                                    WriteOptions())
        except errors.StatusError as conflict:
            if conflict.code != 409:
                raise
        return
    if current.get("data") == data:
        return

    def change(obj: dict[str, object]) -> dict[str, object]:
        obj["data"] = data
        return obj

    await configmaps.mutate(NAMESPACE, NAME, change, WriteOptions())
