"""--admission-control-config-file: an AdmissionConfiguration naming each plugin's configuration,
inline or in a file of its own (a relative path is relative to the AdmissionConfiguration's
directory), as upstream's ReadAdmissionConfiguration reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

API_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1", "apiserver.k8s.io/v1alpha1")


class AdmissionConfigError(ValueError):
    """The file cannot be used; the message says why, for the startup error."""


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise AdmissionConfigError(f"unable to read admission control configuration from {str(path)!r}: {exc}") \
            from exc


def load(path: str) -> dict[str, Any]:
    """Each configured plugin's configuration object by plugin name; {} when no file is given."""
    if not path:
        return {}
    file = Path(path)
    doc = _read(file)
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionConfiguration" or \
            doc.get("apiVersion") not in API_VERSIONS:
        raise AdmissionConfigError(f"{path}: not an AdmissionConfiguration of {', '.join(API_VERSIONS)}")
    out: dict[str, Any] = {}
    for i, plugin in enumerate(doc.get("plugins") or []):
        if not isinstance(plugin, dict) or not plugin.get("name"):
            raise AdmissionConfigError(f"{path}: plugins[{i}].name is required")
        if plugin.get("path"):
            own = Path(str(plugin["path"]))
            out[str(plugin["name"])] = _read(own if own.is_absolute() else file.parent / own)
        else:
            out[str(plugin["name"])] = plugin.get("configuration")
    return out
