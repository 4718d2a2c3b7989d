"""The machine-template contract: the Go-template sandbox, strict parsing, rendering each
provider's shipped template.yaml, rollout digests and the MachineDeployment renderer."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from cloudloop.cloud.aws.capi import INFRA_KINDS as AWS_KINDS
from cloudloop.cloud.aws.capi import NODE_TEMPLATES as AWS_TEMPLATES
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.capi import NODE_TEMPLATES as DVP_TEMPLATES
from cloudloop.cloud.openstack.capi import INFRA_KINDS as OPENSTACK_KINDS
from cloudloop.cloud.openstack.capi import NODE_TEMPLATES as OPENSTACK_TEMPLATES
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.cloud.zvirt.capi import NODE_TEMPLATES as ZVIRT_TEMPLATES
from cloudloop.nodegroup.contract import Contract, ContractError, RenderContext
from cloudloop.nodegroup.gotemplate import Template, TemplateError
from cloudloop.nodegroup.render import Bootstrap, NodeGroup, render_node_group


@pytest.mark.parametrize(
    ("source", "data", "expected"),
    [
        ("a {{ .x }} b", {"x": 1}, "a 1 b"),
        ("a {{- .x -}} b", {"x": "y"}, "ayb"),
        ("{{ .x | quote }}", {"x": 'he said "hi"'}, '"he said \\"hi\\""'),
        ("{{ .n | int }}", {"n": 4.0}, "4"),
        ("{{ .n }}", {"n": 4.0}, "4"),
        ("{{ if .a }}yes{{ else }}no{{ end }}", {"a": 0}, "no"),
        ("{{ if .a }}1{{ else if .b }}2{{ else }}3{{ end }}", {"a": "", "b": [1]}, "2"),
        ('{{ get .m "k" | default "d" }}', {"m": {}}, "d"),
        ('{{ hasKey .m "k" }}', {"m": {"k": None}}, "true"),
        ("{{ range $i, $v := .l }}{{ $i }}={{ $v }};{{ end }}", {"l": ["a", "b"]}, "0=a;1=b;"),
        ("{{ range .l }}[{{ . }}]{{ else }}none{{ end }}", {"l": []}, "none"),
        ("{{ with .m }}{{ .k }}{{ end }}", {"m": {"k": "v"}}, "v"),
        ("{{ $x := .a }}{{ range .l }}{{ $x }}{{ end }}", {"a": "z", "l": [1, 2]}, "zz"),
        ("{{ range $d := .l }}{{ $.top }}{{ $d.n }}{{ end }}", {"top": "t", "l": [{"n": 1}]}, "t1"),
        ("{{ .m | toJson }}", {"m": {"b": 1, "a": "x"}}, '{"a":"x","b":1}'),
        ('{{ (get .m "k").v }}', {"m": {"k": {"v": 7}}}, "7"),
        ('{{ printf "%s-%d" .a .b }}', {"a": "x", "b": 3.0}, "x-3"),
        ("{{/* a comment */}}ok", {}, "ok"),
        ('{{ eq .a "x" }} {{ ne .a "x" }}', {"a": "x"}, "true false"),
        ('{{ uniq (concat .a .b) | join "," }}', {"a": ["x", "y"], "b": ["y", "z"]}, "x,y,z"),
        ("{{ append .a 3 | toJson }}", {"a": [1, 2]}, "[1,2,3]"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_go_template_semantics(source: str, data: dict[str, Any], expected: str) -> None:
    assert Template.parse(source).render(data) == expected


@pytest.mark.parametrize(
    ("source", "data", "message"),
    [
        ("{{ .missing }}", {}, "no entry for key 'missing'"),
        ("{{ .a.b }}", {"a": "s"}, "nil pointer"),
        ("{{ now }}", {}, 'function "now" not defined'),
        ('{{ env "HOME" }}', {}, 'function "env" not defined'),
        ("{{ if .a }}x", {"a": 1}, "unclosed"),
        ("{{ end }}", {}, "unexpected {{end}}"),
        ('{{ fail "no image" }}', {}, "no image"),
        ('{{ required "need x" .x }}', {"x": ""}, "need x"),
        ('{{ include "x" . }}', {}, 'function "include" not defined'),
    ],
    ids=[
        "missing-key",
        "through-scalar",
        "clock",
        "env",
        "unclosed",
        "stray-end",
        "fail",
        "required",
        "include",
    ],
)
def test_go_template_errors(source: str, data: dict[str, Any], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        Template.parse(source).render(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rolloutFields: [a]\ntemplate: |\n  kind: X\n", "unsupported"),
        ("version: v3\nrolloutFields: [a]\ntemplate: |\n  kind: X\n", "unsupported"),
        ("version: v2\nrolloutFields: [a]\ntemplate: ''\n", "empty template"),
        ("version: v2\ntemplate: |\n  kind: X\n", "recreate machines"),
        ("version: v2\nrolloutFields: [a, a]\ntemplate: |\n  kind: X\n", "duplicate"),
        ("version: v2\nrolloutFields: ['a..b']\ntemplate: |\n  kind: X\n", "malformed"),
        ("version: v2\nrolloutFields: [a]\nrolloutField: [b]\ntemplate: |\n  kind: X\n", "unknown"),
        ("version: v2\nrolloutFields: [a]\ntemplate: |\n  kind: {{ now }}\n", "now"),
        (
            "version: v2\nrolloutFields: [a]\nmachineDeployment:\n  additionalFields:\n"
            "    infrastructureRef.name: x\ntemplate: |\n  kind: X\n",
            "belongs to the renderer",
        ),
    ],
    ids=[
        "no-version",
        "future",
        "empty",
        "no-rollout",
        "dup",
        "path",
        "unknown-key",
        "now",
        "owned-field",
    ],
)
def test_contract_parsing_is_strict(text: str, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        Contract.parse(text)


def test_rendered_metadata_is_rejected() -> None:
    contract = Contract.parse(
        "version: v2\nrolloutFields: [a]\ntemplate: |\n  apiVersion: v1\n  kind: X\n"
        "  metadata: {name: x}\n  spec: {}\n"
    )
    with pytest.raises(ContractError, match="must not set metadata"):
        contract.render(RenderContext(instance_class={}, zone="z", node_group="g"))


DVP_CLASS: dict[str, Any] = {
    "virtualMachine": {
        "cpu": {"cores": 2, "coreFraction": "50%"},
        "memory": {"size": "4Gi"},
        "virtualMachineClassName": "generic",
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    },
    "rootDisk": {
        "size": "20Gi",
        "storageClass": "linstor-thin-r1",
        "image": {"kind": "ClusterVirtualImage", "name": "ubuntu-24-04"},
    },
    "additionalDisks": [{"size": "10Gi"}],
}
ZVIRT_CLASS: dict[str, Any] = {
    "numCPUs": 4,
    "memory": 8192,
    "template": "debian-12",
    "vnicProfileID": "0000000a-000a-000a-000a-000000000398",
}


def test_dvp_template_renders_a_deckhouse_machine_template() -> None:
    contract = Contract.parse(DVP_TEMPLATES.contract_text())
    obj = contract.render(RenderContext(instance_class=DVP_CLASS, zone="z1", node_group="g"))
    assert (obj["apiVersion"], obj["kind"]) == (
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "DeckhouseMachineTemplate",
    )
    assert obj["spec"]["template"]["spec"] == {
        "vmClassName": "generic",
        "rootDiskStorageClass": "linstor-thin-r1",
        "cpu": {"cores": 2, "cpuFraction": "50%"},
        "memory": "4Gi",
        "rootDiskSize": "20Gi",
        "additionalDisks": [{"size": "10Gi", "storageClass": "linstor-thin-r1"}],
        "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": "ubuntu-24-04"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    context = RenderContext(instance_class=DVP_CLASS, zone="z1", node_group="g")
    assert contract.machine_deployment_fields(context) == {"failureDomain": "z1"}


def test_zvirt_template_renders_capz_fields_with_defaults() -> None:
    contract = Contract.parse(ZVIRT_TEMPLATES.contract_text())
    obj = contract.render(RenderContext(instance_class=ZVIRT_CLASS, zone="default", node_group="g"))
    assert obj["kind"] == "ZvirtMachineTemplate"
    assert obj["spec"]["template"]["spec"] == {
        "template": "debian-12",
        "vnicProfileID": "0000000a-000a-000a-000a-000000000398",
        "cpu": {"sockets": 1, "cores": 4, "threads": 1},
        "memory": 8192,
        "rootDiskSizeGb": 50,
        "nicName": "nic1",
    }


OPENSTACK_CLASS: dict[str, Any] = {
    "flavorName": "m1.large",
    "rootDiskSize": 30.0,
    "additionalNetworks": ["storage"],
    "additionalSecurityGroups": ["web", "ssh"],
    "additionalTags": {"team": "a", "env": "dev"},
    "tags": ["raw-tag"],
}
OPENSTACK_PROVIDER: dict[str, Any] = {
    "instances": {
        "imageName": "ubuntu-22.04",
        "mainNetwork": "kube",
        "securityGroups": ["ssh", "base"],
        "sshKeyPairName": "cluster-key",
    },
    "internalNetworkNames": ["kube"],
    "podNetworkMode": "DirectRoutingWithPortSecurityEnabled",
    "tags": {"env": "prod", "owner": "ops"},
}


def test_openstack_template_renders_capo_fields_as_deckhouse_maps_them() -> None:
    contract = Contract.parse(OPENSTACK_TEMPLATES.contract_text())
    context = RenderContext(
        instance_class=OPENSTACK_CLASS,
        zone="nova",
        node_group="w",
        provider=OPENSTACK_PROVIDER,
        cluster_uuid="u1",
        pod_subnet="10.111.0.0/16",
    )
    obj = contract.render(context)
    assert (obj["apiVersion"], obj["kind"]) == (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "OpenStackMachineTemplate",
    )
    groups = [{"filter": {"name": n}} for n in ("ssh", "base", "web")]
    assert obj["spec"]["template"]["spec"] == {
        "flavor": "m1.large",
        "image": {"filter": {"name": "ubuntu-22.04"}},
        "sshKeyName": "cluster-key",
        "configDrive": True,
        "securityGroups": groups,
        "ports": [
            {
                "network": {"filter": {"name": "kube"}},
                "securityGroups": groups,
                "allowedAddressPairs": [{"ipAddress": "10.111.0.0/16"}],
            },
            {"network": {"filter": {"name": "storage"}}, "securityGroups": groups},
        ],
        "rootVolume": {"sizeGiB": 30, "availabilityZone": {"from": "Machine"}},
        "tags": [
            "owner=ops",
            "env=dev",
            "team=a",
            "raw-tag",
            "deckhouse-u1=1",
            "role-deckhouse-w-nova=1",
            "use-cluster-api=1",
        ],
        "serverMetadata": [
            {"key": "kubernetes.io-cluster-deckhouse-u1", "value": "1"},
            {"key": "kubernetes.io-role-deckhouse-w-nova", "value": "1"},
        ],
        "schedulerHintAdditionalProperties": [
            {"name": "deckhouse-zone", "value": {"type": "String", "string": "nova"}}
        ],
    }
    assert contract.machine_deployment_fields(context) == {"failureDomain": "nova"}


def test_openstack_template_needs_an_image_and_a_network() -> None:
    contract = Contract.parse(OPENSTACK_TEMPLATES.contract_text())
    with pytest.raises(ContractError, match="imageName"):
        contract.render(RenderContext(instance_class={"flavorName": "f"}, zone="z", node_group="g"))
    with pytest.raises(ContractError, match="mainNetwork"):
        contract.render(
            RenderContext(
                instance_class={"flavorName": "f", "imageName": "i"}, zone="z", node_group="g"
            )
        )
    obj = contract.render(
        RenderContext(
            instance_class={"flavorName": "f", "imageName": "i", "mainNetwork": "n"},
            zone="z",
            node_group="g",
        )
    )
    spec = obj["spec"]["template"]["spec"]
    assert spec["ports"] == [{"network": {"filter": {"name": "n"}}}]
    assert "rootVolume" not in spec and "securityGroups" not in spec


# -- AWS: CAPA's AWSMachineTemplate from an AWSInstanceClass -----------------------------------
AWS_PROVIDER: dict[str, Any] = {
    "instances": {
        "ami": "ami-0a1b2c3d",
        "additionalSecurityGroups": ["sg-0node"],
        "associatePublicIPAddress": False,
        "iamProfileName": "pfx-node",
    },
    "internal": {"zoneToSubnetIdMap": {"eu-west-1a": "subnet-0a", "eu-west-1b": "subnet-0b"}},
    "keyName": "pfx",
    "tags": {"team": "infra", "env": "prod"},
}


def test_aws_template_renders_capa_fields_with_deckhouse_defaults() -> None:
    contract = Contract.parse(AWS_TEMPLATES.contract_text())
    obj = contract.render(
        RenderContext(
            instance_class={"instanceType": "m5.large"}, zone="eu-west-1a", node_group="g"
        )
    )
    assert (obj["apiVersion"], obj["kind"]) == (
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "AWSMachineTemplate",
    )
    # No provider values (`cloudloop nodegroup render`): the driver fills the rest.
    assert obj["spec"]["template"]["spec"] == {
        "instanceType": "m5.large",
        "rootVolume": {"size": 20, "type": "gp2"},
    }
    context = RenderContext(instance_class={"instanceType": "m5.large"}, zone="z", node_group="g")
    assert contract.machine_deployment_fields(context) == {"failureDomain": "z"}


def test_aws_template_takes_the_provider_values_as_mcm_does() -> None:
    contract = Contract.parse(AWS_TEMPLATES.contract_text())
    instance_class = {
        "instanceType": "m5.large",
        "spot": True,
        "diskType": "io1",
        "iops": "4000",
        "diskSizeGb": 50.0,  # numbers arrive as floats
        "additionalTags": {"env": "dev"},
        "additionalSecurityGroups": ["sg-0node", "sg-0extra"],
        "capacity": {"cpu": 2, "memory": "8Gi"},
    }
    obj = contract.render(
        RenderContext(
            instance_class=instance_class,
            zone="eu-west-1b",
            node_group="g",
            provider=AWS_PROVIDER,
        )
    )
    assert obj["spec"]["template"]["spec"] == {
        "instanceType": "m5.large",
        "ami": {"id": "ami-0a1b2c3d"},
        "iamInstanceProfile": "pfx-node",
        "additionalSecurityGroups": [{"id": "sg-0node"}, {"id": "sg-0extra"}],  # uniq
        "subnet": {"id": "subnet-0b"},
        "publicIP": False,
        "sshKeyName": "pfx",
        "rootVolume": {"size": 50, "type": "io1", "iops": 4000},
        "spotMarketOptions": {},
        "additionalTags": {"env": "dev", "team": "infra"},  # the class wins
    }
    own_ami = contract.render(
        RenderContext(
            instance_class={"instanceType": "m5.large", "ami": "ami-0own"},
            zone="eu-west-1a",
            node_group="g",
            provider=AWS_PROVIDER,
        )
    )
    assert own_ami["spec"]["template"]["spec"]["ami"] == {"id": "ami-0own"}


@pytest.mark.parametrize(
    ("change", "rolls"),
    [
        (lambda c: c.update(instanceType="m5.xlarge"), True),
        (lambda c: c.update(diskSizeGb=30), True),
        (lambda c: c.update(spot=True), True),
        (lambda c: c.update(additionalTags={"a": "b"}), True),
        (lambda c: c.update(capacity={"cpu": 4}), False),
    ],
    ids=["type", "disk", "spot", "tags", "capacity"],
)
def test_aws_rollout_fields(change: Any, rolls: bool) -> None:
    contract = Contract.parse(AWS_TEMPLATES.contract_text())
    before = {"instanceType": "m5.large", "diskSizeGb": 20}
    changed = dict(before)
    change(changed)
    assert bool(contract.changes(before, changed)) is rolls


@pytest.mark.parametrize(
    ("change", "rolls"),
    [
        (lambda c: c.update(flavorName="m1.xlarge"), True),
        (lambda c: c.update(rootDiskSize=30), False),
        (lambda c: c["tags"].append("x"), True),
        (lambda c: c.update(capacity={"cpu": 2, "memory": "4Gi"}), False),
    ],
    ids=["flavor", "same-number", "tags", "capacity"],
)
def test_openstack_rollout_fields(change: Any, rolls: bool) -> None:
    import copy

    contract = Contract.parse(OPENSTACK_TEMPLATES.contract_text())
    changed = copy.deepcopy(OPENSTACK_CLASS)
    change(changed)
    before = contract.rollout_digest(OPENSTACK_CLASS, "z", "uuid")
    assert (contract.rollout_digest(changed, "z", "uuid") != before) is rolls


@pytest.mark.parametrize(
    ("change", "rolls"),
    [
        (lambda c: c["virtualMachine"]["cpu"].update(cores=4), True),
        (lambda c: c["virtualMachine"]["cpu"].update(cores=2.0), False),
        (lambda c: c["rootDisk"]["image"].update(name="other"), True),
        (lambda c: c["virtualMachine"].update(priorityClassName="high"), False),
        (lambda c: c.update(etcdDisk={"size": "10Gi"}), False),
        (lambda c: c["additionalDisks"].append({"size": "1Gi"}), True),
    ],
    ids=["cores", "same-number", "image", "placement", "etcd", "disks"],
)
def test_rollout_digest_changes_only_with_rollout_fields(change: Any, rolls: bool) -> None:
    import copy

    contract = Contract.parse(DVP_TEMPLATES.contract_text())
    changed = copy.deepcopy(DVP_CLASS)
    change(changed)
    before = contract.rollout_digest(DVP_CLASS, "z", "uuid")
    assert (contract.rollout_digest(changed, "z", "uuid") != before) is rolls
    assert bool(contract.changes(DVP_CLASS, changed)) is rolls


@pytest.mark.parametrize(
    ("kinds", "templates", "spec", "kind"),
    [
        (DVP_KINDS, DVP_TEMPLATES, DVP_CLASS, "DVPInstanceClass"),
        (ZVIRT_KINDS, ZVIRT_TEMPLATES, ZVIRT_CLASS, "ZvirtInstanceClass"),
        (
            OPENSTACK_KINDS,
            OPENSTACK_TEMPLATES,
            {**OPENSTACK_CLASS, "imageName": "i", "mainNetwork": "n"},
            "OpenStackInstanceClass",
        ),
        (AWS_KINDS, AWS_TEMPLATES, {"instanceType": "t3.large"}, "AWSInstanceClass"),
    ],
    ids=["dvp", "zvirt", "openstack", "aws"],
)
def test_node_group_renders_a_machine_deployment_per_zone(
    kinds: Any, templates: Any, spec: dict[str, Any], kind: str
) -> None:
    group = NodeGroup(
        name="workers",
        instance_class={"kind": kind, "metadata": {"name": "w"}, "spec": spec},
        cluster="c1",
        namespace="ns",
        bootstrap=Bootstrap(data_secret_name="boot"),
        zones=("a", "b"),
        replicas=3,
    )
    objects = render_node_group(group, kinds, templates)
    assert [o["kind"] for o in objects] == [kinds.template.kind, "MachineDeployment"] * 2
    template, deployment = objects[0], objects[1]
    assert deployment["spec"]["replicas"] == 3
    ref = deployment["spec"]["template"]["spec"]["infrastructureRef"]
    assert ref == {
        "apiGroup": kinds.template.group,
        "kind": kinds.template.kind,
        "name": template["metadata"]["name"],
    }
    assert deployment["spec"]["template"]["spec"]["bootstrap"] == {"dataSecretName": "boot"}
    names = {o["metadata"]["name"] for o in objects}
    assert len(names) == 4  # one template and one deployment per zone
    yaml.safe_dump_all(objects)  # printable


def test_wrong_instance_class_kind_is_refused() -> None:
    group = NodeGroup(
        name="g",
        instance_class={"kind": "ZvirtInstanceClass", "spec": ZVIRT_CLASS},
        cluster="c",
        namespace="n",
        bootstrap=Bootstrap(data_secret_name="b"),
    )
    with pytest.raises(ContractError, match="not a DVPInstanceClass"):
        render_node_group(group, DVP_KINDS, DVP_TEMPLATES)


def test_templates_secret_is_where_the_node_manager_reads_it() -> None:
    secret = DVP_TEMPLATES.secret()
    assert secret["metadata"]["name"] == "d8-cloud-provider-dvp-capi"
    assert secret["metadata"]["namespace"] == "kube-system"
    assert (
        secret["metadata"]["labels"]["cloud-provider.deckhouse.io/ephemeral-nodes-templates"]
        == "capi"
    )
    assert "template.yaml" in secret["data"]


def test_cli_renders_an_openstack_class_with_the_provider_values(tmp_path: Any) -> None:
    """``cloudloop nodegroup render --provider-values``: the registration Secret's ``openstack``
    subtree is the template's ``.provider`` (image, network, groups default from it)."""
    import json

    from click.testing import CliRunner

    from cloudloop.cli import main

    ic = tmp_path / "ic.yaml"
    ic.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "OpenStackInstanceClass",
                "metadata": {"name": "w"},
                "spec": {"flavorName": "m1.small"},
            }
        )
    )
    values = tmp_path / "openstack.json"
    values.write_text(json.dumps(OPENSTACK_PROVIDER))
    args = ["nodegroup", "render", f"--instance-class={ic}", "--name=workers", "--cluster=c1"]
    args += ["--bootstrap-secret=boot", "--zones=nova", "--pod-subnet=10.111.0.0/16"]
    result = CliRunner().invoke(main, [*args, f"--provider-values={values}"])
    assert result.exit_code == 0, result.output
    template, deployment = [o for o in yaml.safe_load_all(result.output) if o]
    spec = template["spec"]["template"]["spec"]
    assert spec["image"] == {"filter": {"name": "ubuntu-22.04"}}
    assert spec["ports"][0]["network"] == {"filter": {"name": "kube"}}
    assert spec["ports"][0]["allowedAddressPairs"] == [{"ipAddress": "10.111.0.0/16"}]
    assert deployment["spec"]["template"]["spec"]["failureDomain"] == "nova"
    missing = CliRunner().invoke(main, args)
    assert missing.exit_code != 0 and "imageName" in missing.output
