"""The import-linter contracts name every top-level package, so a new component is held to the layering.

import-linter checks only the packages a contract lists, and fails on listed packages that do not
exist; this test is what notices a package added to the repository but not to the contracts.
"""

from __future__ import annotations

import tomllib
from typing import Any

from tests.conftest import REPO

# Top-level packages that are not part of the product: they may import anything.
NOT_LAYERED = {"tests", "bench"}


def _packages() -> set[str]:
    return {p.parent.name for p in REPO.glob("*/__init__.py")} - NOT_LAYERED


def _contracts() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return config, config["contracts"]


def test_every_package_is_analysed_and_kept_acyclic() -> None:
    config, contracts = _contracts()
    assert set(config["root_packages"]) == _packages()
    [acyclic] = [c for c in contracts if c["type"] == "acyclic_siblings"]
    assert set(acyclic["ancestors"]) == _packages()


def test_services_imports_no_component_and_components_import_no_other() -> None:
    _, contracts = _contracts()
    components = _packages() - {"services"}
    [below] = [c for c in contracts if c["type"] == "forbidden" and c["source_modules"] == ["services"]]
    assert set(below["forbidden_modules"]) == components
    [independent] = [c for c in contracts if c["type"] == "independence" and "." not in "".join(c["modules"])]
    assert set(independent["modules"]) == components
