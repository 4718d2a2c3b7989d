"""Bootstrap data selection: which file each node's machine boots with, what enters the
definition (name, digest, size; never the bytes) and what the create step reads."""

from __future__ import annotations

import hashlib

import pytest

from cloudloop.layouts import bootstrap
from cloudloop.layouts.model import LayoutDef, ModuleDef, ResourceDef

FILES = {"/m/all.yaml": b"#cloud-config\nall\n", "/m/master.yaml": b"#cloud-config\nmaster\n"}


def node(module_id: str, name: str, group: str, *, machine: bool = True) -> ModuleDef:
    vm = ResourceDef(kind="x.vm", name=name, properties={"size": 1})
    return ModuleDef(
        id=module_id,
        module="master-node" if group == "master" else "static-node",
        node_name=name,
        group=group,
        machine=vm.key if machine else "",
        resources=[ResourceDef(kind="x.disk", name=name), vm],
    )


def layout(*nodes: ModuleDef) -> LayoutDef:
    base = ModuleDef(
        id="base", module="base-infrastructure", resources=[ResourceDef(kind="x.net", name="p")]
    )
    return LayoutDef(provider="x", layout="Standard", prefix="p", uuid="u", modules=[base, *nodes])


def user_data(defined: LayoutDef, module_id: str) -> object:
    module = defined.module(module_id)
    [vm] = [r for r in module.resources if r.key == module.machine]
    return vm.properties.get("user_data")


def read(name: str) -> bytes:
    return FILES[name]


def test_a_node_takes_its_name_then_its_group_then_every_node() -> None:
    defined = bootstrap.attach(
        layout(
            node("master-0", "p-master-0", "master"),
            node("master-1", "p-master-1", "master"),
            node("static-front-0", "p-front-0", "front"),
        ),
        {"": "/m/all.yaml", "master": "/m/master.yaml", "p-master-1": "/m/all.yaml"},
        read,
    )
    digest = {n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()}
    assert user_data(defined, "master-0") == {
        "$file": "/m/master.yaml",
        "sha256": digest["/m/master.yaml"],
        "bytes": len(FILES["/m/master.yaml"]),
    }
    assert user_data(defined, "master-1")["sha256"] == digest["/m/all.yaml"]  # type: ignore[index]
    assert user_data(defined, "static-front-0")["$file"] == "/m/all.yaml"  # type: ignore[index]
    assert "user_data" not in defined.module("base").resources[0].properties
    # only the machine carries it; the bytes are nowhere in the definition
    assert b"master\n".decode() not in defined.model_dump_json()


def test_no_selection_changes_nothing_and_reads_nothing() -> None:
    given = layout(node("master-0", "p-master-0", "master"))
    assert bootstrap.attach(given, {}, lambda _: pytest.fail("read")) is given


def test_a_node_without_a_selector_boots_without_user_data() -> None:
    defined = bootstrap.attach(
        layout(
            node("master-0", "p-master-0", "master"), node("static-front-0", "p-front-0", "front")
        ),
        {"master": "/m/master.yaml"},
        read,
    )
    assert user_data(defined, "static-front-0") is None


def test_an_unknown_selector_is_refused_naming_it() -> None:
    with pytest.raises(bootstrap.BootstrapInvalid, match="no node or node group named back"):
        bootstrap.attach(
            layout(node("master-0", "p-master-0", "master")), {"back": "/m/all.yaml"}, read
        )


def test_a_cloud_whose_nodes_take_none_yet_is_refused() -> None:
    with pytest.raises(bootstrap.BootstrapInvalid, match="x layouts do not take bootstrap data"):
        bootstrap.attach(
            layout(node("master-0", "p-master-0", "master", machine=False)),
            {"": "/m/all.yaml"},
            read,
        )


def test_the_create_step_reads_the_bytes_and_refuses_a_changed_file() -> None:
    value = bootstrap.property_value("/m/all.yaml", FILES["/m/all.yaml"])
    loaded = bootstrap.load({"user_data": value, "size": 1}, read)
    assert bootstrap.data_of(loaded["user_data"]) == FILES["/m/all.yaml"]
    assert bootstrap.digest_of(loaded["user_data"]) == value["sha256"] == bootstrap.digest_of(value)
    assert loaded["size"] == 1
    with pytest.raises(bootstrap.BootstrapInvalid, match=r"/m/all\.yaml changed after"):
        bootstrap.load({"user_data": value}, lambda _: b"other")
    with pytest.raises(bootstrap.BootstrapInvalid, match="not loaded"):
        bootstrap.data_of(value)
    assert bootstrap.data_of(None) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("boot.yaml", ("", "boot.yaml")),
        ("master=boot.yaml", ("master", "boot.yaml")),
        ("p-front-0=/m/a=b.yaml", ("p-front-0", "/m/a=b.yaml")),
        ("/m/a=b.yaml", ("", "/m/a=b.yaml")),
    ],
)
def test_option_values(value: str, expected: tuple[str, str]) -> None:
    assert bootstrap.parse_option(value) == expected


def test_an_empty_file_is_refused() -> None:
    with pytest.raises(bootstrap.BootstrapInvalid, match=r"/m/empty is empty"):
        bootstrap.attach(
            layout(node("master-0", "p-master-0", "master")), {"": "/m/empty"}, lambda _: b""
        )
