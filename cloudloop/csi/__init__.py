"""The CSI driver: the gRPC surface Kubernetes calls, over the volume workflows.

``server`` runs ``cloudloop csi-controller`` (Identity + Controller, :mod:`.controller`, every
RPC through :mod:`.operations`) and ``cloudloop csi-node`` (Identity + Node, :mod:`.node`, with
:mod:`.mounter` and :mod:`.devices`); :mod:`.objects` keeps the ``CSIDriver`` and the cloud's
StorageClasses; :mod:`.v1` holds the stubs generated from the spec's ``csi.proto``.
"""
