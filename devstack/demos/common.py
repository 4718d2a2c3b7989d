"""What every demo shares: the Kubernetes resources the demos create beyond the product's own."""

from __future__ import annotations

from cloudloop.kube.resources import Resource

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
