"""Test-only helpers shared by several feature folders (the backends' own helpers, shared with the
benchmarks, are :mod:`devstack.backends`)."""
