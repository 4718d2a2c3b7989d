"""Processes that run on every node (DaemonSets) and talk to the Kubernetes API only.

Rules: a node agent holds no control-plane credential: it never imports a Temporal client (an
import-linter contract) and never reads a cloud credential; what it learns goes onto its own
Node (an annotation, Events), limited to that by its RBAC and a ValidatingAdmissionPolicy, and
a leader-elected starter, which holds the Temporal connection, acts on it.
"""
