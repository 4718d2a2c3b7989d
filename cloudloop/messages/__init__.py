"""Inputs and outputs of workflows and activities: one pydantic model per call, one module per
capability (``probe``, ...).

Workflows import only these modules (plus the standard library and temporalio), so they must stay
free of I/O and of the kubernetes and cloud SDKs. Each module also names its activities: workflows
call activities by those names, and the activity modules register under the same names.
"""
