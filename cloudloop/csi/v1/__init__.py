"""The CSI spec's gRPC messages and services (``package csi.v1``), generated, never edited.

``csi_pb2*`` are compiled from ``csi.proto`` of ``github.com/container-storage-interface/spec``
(the version csi-sanity is built against) by ``python -m devstack.csi_stubs``;
``tests/csi/test_stubs.py`` fails when they no longer match a fresh generation.
"""
