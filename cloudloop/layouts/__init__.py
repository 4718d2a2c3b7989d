"""Layouts: the upstream ``<Provider>ClusterConfiguration`` documents, validated, and the
provider-neutral resource definitions a layout workflow applies, plans and destroys.

Rules: pure data and validation only (pydantic, the standard library): nothing here calls a cloud,
Kubernetes or Temporal, so the CLI refuses a bad document before any cloud call and the messages
of the layout workflows can carry these models.
"""
