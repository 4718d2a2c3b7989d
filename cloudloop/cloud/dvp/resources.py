"""The DVP virtualization API (``virtualization.deckhouse.io/v1alpha2``) as the driver uses it:
resources, labels and the names Deckhouse gives a machine's VM, disks and cloud-init Secret."""

from __future__ import annotations

from cloudloop.kube.resources import Resource

GROUP = "virtualization.deckhouse.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"

VIRTUAL_MACHINES = Resource(GROUP, VERSION, "virtualmachines", "VirtualMachine")
VIRTUAL_DISKS = Resource(GROUP, VERSION, "virtualdisks", "VirtualDisk")
VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS = Resource(
    GROUP,
    VERSION,
    "virtualmachineblockdeviceattachments",
    "VirtualMachineBlockDeviceAttachment",
)
VIRTUAL_IMAGES = Resource(GROUP, VERSION, "virtualimages", "VirtualImage")
CLUSTER_VIRTUAL_IMAGES = Resource(
    GROUP, VERSION, "clustervirtualimages", "ClusterVirtualImage", namespaced=False
)
VIRTUAL_DISK_SNAPSHOTS = Resource(GROUP, VERSION, "virtualdisksnapshots", "VirtualDiskSnapshot")
VIRTUAL_MACHINE_CLASSES = Resource(
    GROUP, VERSION, "virtualmachineclasses", "VirtualMachineClass", namespaced=False
)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
SECRETS = Resource("", "v1", "secrets", "Secret")
SERVICES = Resource("", "v1", "services", "Service")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")

#: ``bootDiskImageRef.kind`` → the resource holding the image.
IMAGE_RESOURCES = {
    "VirtualImage": VIRTUAL_IMAGES,
    "ClusterVirtualImage": CLUSTER_VIRTUAL_IMAGES,
    "VirtualDiskSnapshot": VIRTUAL_DISK_SNAPSHOTS,
}

CLOUD_INIT_SECRET_TYPE = "provisioning.virtualization.deckhouse.io/cloud-init"
CLOUD_INIT_KEY = "userData"

# Labels as Deckhouse's capdvp and dvp-common put them.
MANAGED_BY_LABEL = "deckhouse.io/managed-by"
MANAGED_BY_VALUE = "deckhouse"
CLUSTER_UUID_LABEL = "dvp.deckhouse.io/cluster-uuid"
HOSTNAME_LABEL = "dvp.deckhouse.io/hostname"
DISK_NAME_LABEL = "virtualDiskName"
ATTACHMENT_DISK_LABEL = "virtualMachineDiskName"
ATTACHMENT_MACHINE_LABEL = "virtualMachineName"
#: The parent node label that places a VM in a zone (and tells a VM's zone back).
ZONE_LABEL = "topology.kubernetes.io/zone"
#: The InfraMachine UID a VM, disk or Secret was created for: a retried create adopts by it.
MACHINE_UID_LABEL = "cloudloop.io/machine-uid"


def boot_disk_name(machine: str) -> str:
    return f"{machine}-boot"


def additional_disk_name(machine: str, index: int) -> str:
    return f"{machine}-additional-disk-{index}"


def cloud_init_secret_name(machine: str) -> str:
    return f"cloud-init-{machine}"
