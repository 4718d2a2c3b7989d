"""The chart's converge install Job (issue 40): rendered only when the converge is on and a
configuration key is named, a post-install/post-upgrade hook holding what
``cloudloop layout converge install`` needs and nothing more. Rendered by the real helm; the
Job's process is run against the stack in ``tests/layouts/test_converge_stack.py``."""

from __future__ import annotations

from typing import Any

from tests.install.chart import Helm, find, render

ON = {
    "layouts.converge.enabled": "true",
    "layouts.existingSecret": "cluster-layouts",
    "layouts.converge.install.configKey": "cluster.yaml",
}


def jobs(docs: list[dict[str, Any]]) -> list[str]:
    return [d["metadata"]["name"] for d in docs if d["kind"] == "Job"]


def test_no_job_unless_the_converge_is_on_and_a_configuration_is_named(helm: Helm) -> None:
    assert not [j for j in jobs(render(helm, "openstack")) if "converge" in j]
    only_on = render(helm, "openstack", {"layouts.converge.enabled": "true"})
    assert not [j for j in jobs(only_on) if "converge" in j]


def test_the_job_runs_the_install_with_the_workers_mount_and_no_token(helm: Helm) -> None:
    docs = render(helm, "vsphere", {**ON, "layouts.converge.install.auto": "true"})
    job = find(docs, "Job", "-layout-converge-install")
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "post-install,post-upgrade"
    assert "before-hook-creation" in hooks["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    assert container["args"][1:] == [
        "layout",
        "converge",
        "install",
        "--config=/etc/cloudloop/layouts/cluster.yaml",
        "--worker-config-path=cluster.yaml",
        "--interval=3600",
        "--approval-wait=3600",
        "--auto",
        "--bootstrap-from-cluster",
    ]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert volumes[mounts["/etc/cloudloop/layouts"]["name"]]["secret"]["secretName"] == (
        "cluster-layouts"
    )
    assert all(m.get("readOnly") for p, m in mounts.items() if p != "/tmp")
    # the Schedule's input is cluster data: the codec key; the cloud credentials are not needed
    assert "/etc/cloudloop/codec-keys" in mounts
    assert not [v for v in volumes.values() if "credentials" in v["name"]]
    env = {e["name"]: e for e in container["env"]}
    assert all("value" in e for e in env.values())  # no Secret in env
    assert env["CLOUDLOOP_TEMPORAL__CODEC__ENABLED"]["value"] == "true"


def test_a_configuration_key_without_the_secret_is_refused(helm: Helm) -> None:
    done = helm.template(
        [],
        {
            "clusterName": "c",
            "provider": "aws",
            "layouts.converge.enabled": "true",
            "layouts.converge.install.configKey": "cluster.yaml",
        },
        check=False,
    )
    assert done.returncode != 0
    assert "layouts.converge.install.configKey needs layouts.existingSecret" in done.stderr


def test_the_schema_refuses_an_interval_under_a_minute(helm: Helm) -> None:
    done = helm.template(
        [],
        {"clusterName": "c", "provider": "aws", "layouts.converge.install.intervalSeconds": "5"},
        check=False,
    )
    assert done.returncode != 0
    assert "intervalSeconds" in done.stderr
