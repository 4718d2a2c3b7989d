"""cloudloop: a Kubernetes cloud-provider integration whose cloud operations are Temporal workflows.

This package is the shared layer: settings, models, the cloud contract and its drivers, kube
helpers, metrics, the Temporal factory, the local stack and the CLI. Workflows, activities,
workers and starters live in their own top-level packages and import from here.
"""
