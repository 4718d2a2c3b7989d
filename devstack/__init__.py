"""The embedded local stack: real Temporal, kube-apiserver and cloud emulators on loopback.

One module serves both ``cloudloop dev`` and the pytest fixtures, so what the tests prove is what a
user runs. See :class:`devstack.local.LocalStack`.
"""
