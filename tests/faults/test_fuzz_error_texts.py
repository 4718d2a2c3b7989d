"""Fuzzing (hypothesis): no secret or config value in any error text.

Every input a worker or the CLI validates (the five layout documents, the machine specs of
every cloud, the settings with their credentials, OpenStack's ``cloud.conf``, vSphere's
``vsphere.conf``, YAML itself) is given a unique marker in a secret or config field, then
broken in many ways (a wrong type, an unknown field, a missing field, broken YAML around it);
whatever error comes out (the exception's text, the layout activity's ``ApplicationError``
message and details, the CLI's message) must not hold the marker, and must be the refusal it
is documented as, never a crash.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.layout import LayoutActivities
from cloudloop.cloud import errors
from cloudloop.cloud.aws.machine_spec import parse_machine_spec as aws_spec
from cloudloop.cloud.dvp.spec import parse_spec as dvp_spec
from cloudloop.cloud.openstack.config import ConfigError as OpenStackConfigError
from cloudloop.cloud.openstack.config import parse_cloud_conf, parse_cluster_configuration
from cloudloop.cloud.openstack.machine_spec import parse_machine_spec as openstack_spec
from cloudloop.cloud.registry import PROVIDERS, Settings
from cloudloop.cloud.vsphere.config import ConfigError as VsphereConfigError
from cloudloop.cloud.vsphere.config import parse_cloud_config as parse_vsphere_conf
from cloudloop.cloud.vsphere.machinespec import parse_machine_spec as vsphere_spec
from cloudloop.cloud.zvirt.mapping import parse_machine_spec as zvirt_spec
from cloudloop.errortext import describe_validation, yaml_problem
from cloudloop.layouts.config import ClusterIdentity, InvalidConfig, load_documents
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import DefineInput
from cloudloop.settings import LayoutSettings

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
MARKER = "Mk7s3cr3tQ"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: Values carrying the marker, of every shape a field may be given.
MARKED: st.SearchStrategy[Any] = st.sampled_from(
    [
        MARKER,
        f"x{MARKER}",
        f"{MARKER}/99",
        f"10.0.0.{MARKER}/16",
        f"ssh-rsa {MARKER}",
        f" {MARKER} ",
        f"'{MARKER}'",
        f"{MARKER}\n{MARKER}",
        [MARKER],
        [f"{MARKER}", 3],
        {"id": MARKER},
        {"name": MARKER, "x": [MARKER]},
        {"k": {"deep": MARKER}},
    ]
).map(copy.deepcopy)  # a fresh value each draw: a later edit must not change the samples


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (maps and lists), the containers' own paths included."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += leaves(item, (*path, index))
    return found


def put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def drop(doc: Any, path: tuple[Any, ...]) -> None:
    node = doc
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]


@st.composite
def broken(draw: st.DrawFn, base: dict[str, Any], secrets: list[tuple[str, ...]]) -> Any:
    """``base`` with the marker in one of its secrets and in a few other fields, and broken in
    a few ways (marked values of the wrong shape, missing fields, unknown fields)."""
    doc = copy.deepcopy(base)
    for secret in secrets:
        put(doc, secret, draw(MARKED))
    for _ in range(draw(st.integers(1, 4))):
        paths = leaves(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["mark", "mark", "drop", "unknown"]))
        try:
            if how == "mark":
                put(doc, path, draw(MARKED))
            elif how == "drop":
                drop(doc, path)
            else:
                parent = path[:-1]
                node = doc
                for part in parent:
                    node = node[part]
                if isinstance(node, dict):
                    node[draw(st.sampled_from(["unknownField", "zz", "extra"]))] = draw(MARKED)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def _docs(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((EXAMPLES / name).read_text()))


def _provider(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] != "ClusterConfiguration")


#: example → the credential fields of its provider document.
LAYOUT_SECRETS: dict[str, list[tuple[str, ...]]] = {
    "aws-without-nat.yaml": [("provider", "providerSecretAccessKey")],
    "aws-with-nat.yaml": [("provider", "providerAccessKeyId")],
    "openstack-standard.yaml": [("provider", "password")],
    "openstack-simple.yaml": [("provider", "password")],
    "vsphere-standard.yaml": [("provider", "password")],
    "zvirt-standard.yaml": [("provider", "password")],
    "dvp-standard.yaml": [("provider", "kubeconfigDataBase64")],
}


@st.composite
def layout_texts(draw: st.DrawFn) -> str:
    """A layout config file: a broken provider document beside its ClusterConfiguration, and
    now and then its YAML broken around a marked line."""
    name = draw(st.sampled_from(sorted(LAYOUT_SECRETS)))
    docs = _docs(name)
    provider = _provider(docs)
    index = docs.index(provider)
    docs[index] = draw(broken(provider, LAYOUT_SECRETS[name]))
    if draw(st.booleans()):
        cluster = next(i for i, d in enumerate(docs) if d["kind"] == "ClusterConfiguration")
        docs[cluster] = draw(broken(docs[cluster], [("cloud", "prefix")]))
    text = yaml.safe_dump_all(docs)
    if draw(st.booleans()):
        lines = text.splitlines()
        at = draw(st.integers(0, len(lines)))
        junk = draw(
            st.sampled_from(
                [
                    f"\t{MARKER}: [",
                    f"  {MARKER}: {{",
                    f'password: "{MARKER}',
                    f"password: *{MARKER}",
                    f"password: !{MARKER} x",
                    f"- {MARKER}:\n  : {MARKER}",
                    f"{MARKER}: '{MARKER}",
                    f"%{MARKER}",
                ]
            )
        )
        text = "\n".join([*lines[:at], junk, *lines[at:]])
    return text


def assert_no_marker(*texts: Any) -> None:
    for text in texts:
        assert MARKER not in str(text), text


@FUZZ
@given(text=layout_texts())
@example(text=f"kind: AWSClusterConfiguration\nprovider: {{providerSecretAccessKey: [{MARKER}]}}\n")
@example(text=f"kind: [{MARKER}]\n")
@example(text=f"password: {MARKER}\n\tbad")
def test_a_broken_layout_config_never_echoes_a_value(text: str) -> None:
    """The CLI's parse (``load_documents``), as the worker's activity refuses it."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        assert_no_marker(yaml_problem(exc))
        return
    try:
        load_documents(docs, source="cluster.yaml", uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60")
    except InvalidConfig as exc:
        assert_no_marker(exc, *(e.message for e in exc.errors), *(e.path for e in exc.errors))


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mount")


class NoCloud(Exception):
    """What a valid document meets instead of a cloud: this test is about the refusals."""


class _NoCloudPart:
    layouts = ("WithoutNAT", "WithNAT", "Standard")

    def connect(self, config: Any, section: Any) -> Any:
        raise NoCloud


@pytest.fixture
def no_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout activity's providers, each with a layouts part that reaches no cloud."""
    monkeypatch.setattr(
        "activities.layout.PROVIDERS",
        {
            name: dataclasses.replace(record, layouts=_NoCloudPart)  # type: ignore[arg-type]
            for name, record in PROVIDERS.items()
        },
    )


@FUZZ
@given(text=layout_texts())
def test_the_layout_activity_refuses_a_broken_config_without_its_values(
    mount: Path, no_cloud: None, text: str
) -> None:
    """What goes into history: the activity's ``ApplicationError`` (message and details)."""
    (mount / "cluster.yaml").write_text(text)
    activities = LayoutActivities(Settings(layouts=LayoutSettings(source_dir=mount)))
    docs: list[Any] = []
    with contextlib.suppress(yaml.YAMLError):
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    provider = next((d.get("kind") for d in docs if d.get("kind") != "ClusterConfiguration"), "")
    name = str(provider).removesuffix("ClusterConfiguration").lower()
    name = name if name in ("aws", "openstack", "vsphere", "zvirt", "dvp") else "aws"
    try:
        ActivityEnvironment().run(
            activities.define,
            DefineInput(
                provider=name,
                source=ConfigSource(file="cluster.yaml"),
                cluster=ClusterIdentity(prefix="p", uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"),
            ),
        )
    except ApplicationError as exc:
        assert_no_marker(exc.message, exc.details, exc.type)
        if exc.type == "LayoutConfigInvalid":
            assert exc.non_retryable and exc.message.startswith("configuration cluster.yaml")
    except NoCloud:  # a valid document: it got as far as the cloud
        pass


#: Machine specs: (parse, a valid spec, its fields).
SPECS: dict[str, tuple[Any, dict[str, Any]]] = {
    "aws": (
        aws_spec,
        {
            "instanceType": "t3.micro",
            "ami": {"id": "ami-0123456789abcdef0"},
            "subnet": {"id": "subnet-0123456789abcdef0"},
            "additionalSecurityGroups": [{"id": "sg-0123456789abcdef0"}],
            "additionalTags": {"team": "a"},
            "rootVolume": {"size": 20, "type": "gp3"},
        },
    ),
    "openstack": (
        openstack_spec,
        {
            "flavorName": "m1.small",
            "imageName": "ubuntu",
            "mainNetwork": "net",
            "rootDiskSize": 20,
            "tags": ["a"],
        },
    ),
    "zvirt": (
        zvirt_spec,
        {
            "template": "t",
            "vnicProfileID": "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60",
            "cpus": 2,
            "memory": 4096,
            "rootDiskSizeGb": 20,
        },
    ),
    "vsphere": (
        vsphere_spec,
        {
            "template": "t",
            "numCPUs": 2,
            "memoryMiB": 4096,
            "diskGiB": 20,
            "network": {"devices": [{"networkName": "n"}]},
        },
    ),
    "dvp": (
        dvp_spec,
        {"cpu": {"cores": 2}, "memory": {"size": "4Gi"}, "rootDiskSize": "20Gi"},
    ),
}


@st.composite
def machine_specs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    cloud = draw(st.sampled_from(sorted(SPECS)))
    return cloud, draw(broken(SPECS[cloud][1], []))


@FUZZ
@given(case=machine_specs())
def test_a_broken_machine_spec_is_refused_without_its_values(
    case: tuple[str, dict[str, Any]],
) -> None:
    cloud, spec = case
    try:
        SPECS[cloud][0](spec)
    except errors.InvalidRequest as exc:
        assert_no_marker(exc, exc.message)


#: Settings sections holding credentials: (path, a marked value of the wrong shape).
SETTINGS_SECRETS = [
    ("aws", "secret_access_key"),
    ("aws", "access_key_id"),
    ("openstack", "connection", "password"),
    ("vsphere", "password"),
    ("zvirt", "password"),
    ("dvp", "kubeconfig_data_base64"),
    ("nth", "webhook_url"),
    ("nth", "webhook_headers"),
]
SETTINGS_BREAKERS = [
    ("temporal", "graceful_shutdown_s"),
    ("metrics_port",),
    ("aws", "timeout_s"),
    ("csi", "storage_class_exclude"),
    ("layouts", "max_file_bytes"),
    ("provider",),
    ("aws", "unknown"),
    # the validators of the per-cluster queues (issue 39, item 4) word their refusal too
    ("cluster_name",),
    ("temporal", "task_queue"),
    ("temporal", "workflow_id_scope"),
]


@FUZZ
@given(
    secret=st.sampled_from(SETTINGS_SECRETS),
    secret_value=MARKED,
    breaker=st.sampled_from(SETTINGS_BREAKERS),
    breaker_value=st.sampled_from(
        [MARKER, [MARKER], {"x": MARKER}, f"[{MARKER}", -1, [f"({MARKER}"]]
    ),
)
def test_refused_settings_never_print_a_value(
    secret: tuple[str, ...], secret_value: Any, breaker: tuple[str, ...], breaker_value: Any
) -> None:
    values: dict[str, Any] = {}
    put_nested(values, secret, secret_value)
    put_nested(values, breaker, breaker_value)
    try:
        Settings.model_validate(values)
    except ValidationError as exc:
        assert_no_marker(str(exc), repr(exc), describe_validation(exc))


def put_nested(values: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = values
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


CLOUD_CONF = """[Global]
auth-url = http://keystone:5000/v3
username = admin
password = {password}
tenant-name = demo
domain-name = Default
region = RegionOne

[LoadBalancer]
lb-method = ROUND_ROBIN
create-monitor = true
"""


@FUZZ
@given(
    password=MARKED.filter(lambda v: isinstance(v, str)),
    damage=st.sampled_from(
        [
            "",
            f"\n{MARKER}\n",
            f"\n[Global\n{MARKER}",
            f'\nusername = "{MARKER}',
            f"\ncreate-monitor = {MARKER}",
            f"\nmonitor-delay = {MARKER}",
            f"\n= {MARKER}",
        ]
    ),
    yaml_doc=st.booleans(),
)
def test_openstack_credentials_files_are_refused_without_their_values(
    password: str, damage: str, yaml_doc: bool
) -> None:
    try:
        if yaml_doc:
            parse_cluster_configuration(
                "kind: OpenStackClusterConfiguration\nprovider:\n"
                f"  password: {password!r}\n{damage}"
            )
        else:
            parse_cloud_conf(CLOUD_CONF.format(password=password.replace("\n", " ")) + damage)
    except (OpenStackConfigError, ValidationError) as exc:
        assert_no_marker(exc)


VSPHERE_CONF = """global:
  server: vc.example.com
  user: admin
  password: {password}
  port: {port}
  insecureFlag: {insecure}
"""


@FUZZ
@given(
    password=st.sampled_from([MARKER, f"'{MARKER}'", f"[{MARKER}"]),
    port=st.sampled_from(["443", MARKER, f"'{MARKER}'"]),
    insecure=st.sampled_from(["true", MARKER]),
    ini=st.booleans(),
)
def test_vsphere_conf_is_refused_without_its_values(
    password: str, port: str, insecure: str, ini: bool
) -> None:
    text = (
        f"[Global]\nserver = vc\nuser = admin\npassword = {password}\nport = {port}\n"
        f"insecure-flag = {insecure}\n{MARKER}\n"
        if ini
        else VSPHERE_CONF.format(password=password, port=port, insecure=insecure)
    )
    try:
        parse_vsphere_conf(text)
    except (VsphereConfigError, ValidationError) as exc:
        assert_no_marker(exc)


@FUZZ
@given(
    text=st.lists(
        st.sampled_from(
            [
                "a: 1",
                f"b: {MARKER}",
                f"\t{MARKER}",
                f"c: [{MARKER}",
                f"d: '{MARKER}",
                f'e: "{MARKER}\\q"',
                f"f: *{MARKER}",
                f"g: !!{MARKER} x",
                f"{MARKER}: {MARKER}: {MARKER}",
                f"- {MARKER}",
                f"  {MARKER}:",
                f"%YAML {MARKER}",
                "---",
                f"h: @{MARKER}",
                f"i: `{MARKER}",
            ]
        ),
        min_size=1,
        max_size=6,
    )
)
def test_yaml_errors_are_described_without_the_lines(text: list[str]) -> None:
    try:
        list(yaml.safe_load_all("\n".join(text)))
    except yaml.YAMLError as exc:
        described = yaml_problem(exc)
        assert described.startswith("not YAML")
        assert_no_marker(described)
