"""The parent DVP cluster of the local stack: the virtualization CRDs it serves (test stack only;
the product never installs them). The simulator is :mod:`devstack.dvp_simulator`."""

from __future__ import annotations

from pathlib import Path

#: Minimal ``virtualization.deckhouse.io/v1alpha2`` CRDs (VM, disks, attachments, images, classes).
VIRTUALIZATION_CRDS = Path(__file__).parent / "virtualization-crds.yaml"
