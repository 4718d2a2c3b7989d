"""Deckhouse's ``storageClass.exclude`` and ``storageClass.default`` on the real kube-apiserver:
the CSI controller's StorageClass pass (the AWS driver's EBS classes from a discovery document)
makes no excluded class, removes one it made before the exclusion, and keeps the user's; the
driver's VolumeSnapshotClass follows the same document."""

from __future__ import annotations

import uuid
from typing import Any

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.objects import (
    DEFAULT_ANNOTATION,
    DRIVER_LABEL,
    SNAPSHOT_DEFAULT_ANNOTATION,
    VOLUME_SNAPSHOT_CLASSES,
    sync_objects,
    volume_snapshot_class_object,
)
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import StorageClass, VolumeSnapshotClass
from cloudloop.kube.resources import STORAGE_CLASSES
from cloudloop.settings import CsiSettings, VolumeSnapshotClassSettings
from devstack.csi_deployment import write_discovery


def classes(kube: Kube, driver_name: str) -> dict[str, StorageClass]:
    found = kube.list(STORAGE_CLASSES, labelSelector=f"{DRIVER_LABEL}={driver_name}")["items"]
    return {c["metadata"]["name"]: c for c in found}


def test_excluded_classes_are_not_made_and_made_ones_go(
    kube: Kube, settings: Settings, namespace: str
) -> None:
    driver_name = f"ebs-{uuid.uuid4().hex[:6]}.csi.example"
    base = settings.model_copy(
        update={
            "csi": settings.csi.model_copy(update={"driver_name": driver_name}),
            "discovery": settings.discovery.model_copy(update={"namespace": namespace}),
        }
    )
    write_discovery(kube, namespace, {"zones": ["us-east-1a"]})
    driver = AwsDriver(AWS.section(base))
    try:
        assert sync_objects(kube, base, driver)
        made = classes(kube, driver_name)
        assert {"gp3", "st1", "sc1"} <= set(made)
        assert made["gp3"]["metadata"]["annotations"][DEFAULT_ANNOTATION] == "true"

        excluding = base.model_copy(
            update={
                "csi": base.csi.model_copy(update={"storage_class_exclude": ["sc1", "^st", "gp3$"]})
            }
        )
        assert sync_objects(kube, excluding, driver)
        left = classes(kube, driver_name)
        assert not {"sc1", "st1", "gp3"} & set(left), sorted(left)
        assert "gp3-encrypted" in left and "gp2" in left
        # The excluded gp3 was the cloud's default: no class is the default now.
        assert all(
            c["metadata"]["annotations"][DEFAULT_ANNOTATION] == "false" for c in left.values()
        )

        # storageClass.default: the named class, an excluded one never, "-" none.
        for default, expected in (("gp2", {"gp2"}), ("st1", set()), ("-", set()), ("", {"gp3"})):
            chosen = base.model_copy(
                update={
                    "csi": base.csi.model_copy(
                        update={"storage_class_exclude": ["^st"], "default_storage_class": default}
                    )
                }
            )
            assert sync_objects(kube, chosen, driver)
            found = classes(kube, driver_name)
            marked = {
                n
                for n, c in found.items()
                if c["metadata"]["annotations"][DEFAULT_ANNOTATION] == "true"
            }
            assert marked == expected, (default, sorted(marked))
    finally:
        for name in classes(kube, driver_name):
            kube.delete(STORAGE_CLASSES, name)


def test_the_volume_snapshot_class_follows_the_discovery_document(
    kube: Kube, settings: Settings, namespace: str
) -> None:
    """Made with the StorageClasses where the driver has snapshots, re-annotated, replaced when
    its parameters change, left alone when it is someone else's."""
    from devstack.snapshots import install_crds

    install_crds(kube)
    driver_name = f"ebs-{uuid.uuid4().hex[:6]}.csi.example"
    wanted = VolumeSnapshotClassSettings(enabled=True, name=f"snap-{uuid.uuid4().hex[:6]}")

    def synced(**update: Any) -> VolumeSnapshotClass | None:
        csi = settings.csi.model_copy(
            update={
                "driver_name": driver_name,
                "volume_snapshot_class": wanted.model_copy(update=update),
            }
        )
        chosen = settings.model_copy(
            update={
                "csi": csi,
                "discovery": settings.discovery.model_copy(update={"namespace": namespace}),
            }
        )
        assert sync_objects(kube, chosen, AwsDriver(AWS.section(chosen)))
        return kube.get(VOLUME_SNAPSHOT_CLASSES, wanted.name)

    write_discovery(kube, namespace, {"zones": ["us-east-1a"]})
    try:
        made = synced()
        assert made is not None and made["driver"] == driver_name
        assert made["deletionPolicy"] == "Delete" and "parameters" not in made
        assert made["metadata"]["annotations"][SNAPSHOT_DEFAULT_ANNOTATION] == "true"
        uid = made["metadata"]["uid"]
        patched = synced(default=False)
        assert patched is not None and patched["metadata"]["uid"] == uid
        assert patched["metadata"]["annotations"][SNAPSHOT_DEFAULT_ANNOTATION] == "false"
        replaced = synced(parameters={"tagSpecification_1": "team=storage"})
        assert replaced is not None and replaced["metadata"]["uid"] != uid
        assert replaced["parameters"] == {"tagSpecification_1": "team=storage"}
        # The user's class of that name is never touched.
        kube.delete(VOLUME_SNAPSHOT_CLASSES, wanted.name)
        theirs = {**volume_snapshot_class_object(CsiSettings(driver_name="other.example"))}
        theirs["metadata"] = {"name": wanted.name}
        kube.create(VOLUME_SNAPSHOT_CLASSES, theirs)
        kept = synced()
        assert kept is not None and kept["driver"] == "other.example"
    finally:
        if kube.get(VOLUME_SNAPSHOT_CLASSES, wanted.name) is not None:
            kube.delete(VOLUME_SNAPSHOT_CLASSES, wanted.name)
        for name in classes(kube, driver_name):
            kube.delete(STORAGE_CLASSES, name)
