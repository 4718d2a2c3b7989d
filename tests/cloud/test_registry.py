"""The provider shape: one package and one registry line per cloud, capabilities its parts.

These checks read the product's source (AST, not regexes) so a provider name or a cloud-package
import outside the allowed places fails here, before it spreads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from cloudloop.cloud.driver import (
    CAPABILITY_OPERATIONS,
    Capability,
    CloudDriver,
    DiscoveryDefaults,
    Routes,
    part_or_unsupported,
)
from cloudloop.cloud.errors import NotSupported
from cloudloop.cloud.models import DiscoveryData, Route, Zone
from cloudloop.cloud.registry import PROVIDERS, Settings
from tests.support.parts import has

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("cloudloop", "workflows", "activities", "starters", "workers")


def _allowed(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    if rel == "cloudloop/cloud/registry.py":
        return True
    return any(rel.startswith(f"cloudloop/cloud/{name}/") for name in PROVIDERS)


def _product_files() -> list[Path]:
    return [p for top in PRODUCT for p in sorted((ROOT / top).rglob("*.py"))]


def _violations(path: Path) -> list[str]:
    found: list[str] = []
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in PROVIDERS and id(node) not in docstrings:
                found.append(f"{path}:{node.lineno}: provider name {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["cloudloop", "cloud"] and len(parts) > 2 and parts[2] in PROVIDERS:
                found.append(f"{path}:{node.lineno}: imports {node.module}")
            if node.module == "cloudloop.cloud" and any(a.name in PROVIDERS for a in node.names):
                found.append(f"{path}:{node.lineno}: imports a cloud package")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["cloudloop", "cloud"] and len(parts) > 2 and parts[2] in PROVIDERS:
                    found.append(f"{path}:{node.lineno}: imports {alias.name}")
    return found


def test_only_a_cloud_package_and_the_registry_name_a_provider() -> None:
    violations = [v for p in _product_files() if not _allowed(p) for v in _violations(p)]
    assert violations == []


def test_settings_have_one_section_per_provider_and_only_registered_names() -> None:
    settings = Settings()
    for record in PROVIDERS.values():
        assert isinstance(record.section(settings), record.settings)
    with pytest.raises(ValueError, match="unknown provider"):
        Settings(provider="no-such-cloud")


def test_importing_the_registry_loads_no_cloud_sdk() -> None:
    code = (
        "import sys, cloudloop.settings, cloudloop.cloud.registry\n"
        "heavy = [m for m in ('boto3', 'ovirtsdk4', 'pyVmomi', 'openstack', 'kubernetes')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("name", sorted(PROVIDERS), ids=sorted(PROVIDERS))
def test_every_capability_is_all_or_nothing(name: str) -> None:
    """A driver implements all required operations of a capability, or none of them."""
    driver = PROVIDERS[name].make_driver(Settings(provider=name))
    for capability, (required, _) in CAPABILITY_OPERATIONS.items():
        done = {op for op in required if driver.implements(op)}
        assert done in (set(), set(required)), f"{name} {capability}: only {sorted(done)}"
        assert driver.supports(capability) == bool(done)


def test_implements_tells_a_parts_own_operations_from_missing_and_default_ones() -> None:
    """A part lacking a required operation is what the all-or-nothing check above catches; an
    optional operation a part inherits from the contract's defaults is not the cloud's own."""

    class HalfRouting:
        def list_routes(self, cluster: str) -> list[Route]:
            return []

    class Discovering(DiscoveryDefaults):
        def zones(self) -> list[Zone]:
            return []

        def discovery_data(self) -> DiscoveryData:
            return DiscoveryData(region="r")

    class Half(CloudDriver):
        def __init__(self) -> None:
            self.routes = cast(Routes, HalfRouting())
            self.discovery = Discovering()
            self.assembled()

    half = Half()
    assert half.capabilities == frozenset({Capability.ROUTES, Capability.DISCOVERY})
    assert half.implements("list_routes") and not half.implements("create_route")
    assert half.implements("zones") and not half.implements("instance_types")
    assert not half.implements("create_volume")
    with pytest.raises(NotSupported):  # an optional operation the part lacks: the default
        cast(Discovering, half.discovery).instance_types()


def test_a_facade_supports_what_it_has_parts_for() -> None:
    class Routing:
        def list_routes(self, cluster: str) -> list[Route]:
            return []

        def create_route(self, cluster: str, route: Route) -> None:
            return None

        def delete_route(self, cluster: str, route: Route) -> None:
            return None

    class Facade(CloudDriver):
        def __init__(self) -> None:
            self.routes = Routing()
            self.assembled()

    facade = Facade()
    assert facade.capabilities == frozenset({Capability.ROUTES})
    assert facade.supports(Capability.ROUTES) and not facade.supports(Capability.VOLUMES)
    assert has(facade.routes).list_routes("c") == [] and facade.implements("delete_route")
    missing = part_or_unsupported(facade.discovery, facade.provider, Capability.DISCOVERY)
    with pytest.raises(NotSupported):  # what a consumer of a missing part is given
        missing.zones()
