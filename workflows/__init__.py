"""Deterministic, provider-neutral workflows. They import only the standard library, temporalio
and :mod:`cloudloop.messages`, and call activities by name."""
