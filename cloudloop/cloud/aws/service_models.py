"""botocore's service models loaded without their documentation, into plain dicts.

A boto3 client keeps its service's whole model resident, most of it prose and ``OrderedDict``
overhead; this loader halves EC2's, the largest (the figure: ``bench/README.md``).

- Only ``service-2`` models are slimmed: the ``documentation`` of the service, each operation,
  each shape and each member or element reference is dropped (botocore reads it for docstrings
  and help only); everything else is loaded as is (``clientContextParams`` keep theirs, which
  botocore requires).
- JSON objects become ``dict`` rather than ``OrderedDict``: both keep the file's order.
- The loader is a session component (``data_loader``), botocore's own extension point; the
  search paths and caching are botocore's :class:`~botocore.loaders.Loader`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import botocore.loaders
import botocore.session

SERVICE_MODEL = "service-2.json"
DOCUMENTATION = ("documentation", "documentationUrl")
_REFERENCES = ("input", "output", "member", "key", "value")


def slim_service_model(model: dict[str, Any]) -> dict[str, Any]:
    """``model`` (a parsed ``service-2.json``) without its documentation, changed in place."""
    _drop_documentation(model)
    for operation in model.get("operations", {}).values():
        _drop_documentation(operation)
        for reference in _REFERENCES:
            _drop_documentation(operation.get(reference))
        for error in operation.get("errors", ()):
            _drop_documentation(error)
    for shape in model.get("shapes", {}).values():
        _drop_documentation(shape)
        for member in shape.get("members", {}).values():
            _drop_documentation(member)
        for reference in _REFERENCES:
            _drop_documentation(shape.get(reference))
    return model


def _drop_documentation(node: Any) -> None:
    if isinstance(node, dict):
        for key in DOCUMENTATION:
            node.pop(key, None)


class SlimJSONFileLoader(botocore.loaders.JSONFileLoader):
    """botocore's JSON loader, plain dicts, service models without documentation."""

    def _load_file(self, full_path: str, open_method: Callable[..., Any]) -> Any:
        if not os.path.isfile(full_path):
            return None
        with open_method(full_path, "rb") as file:
            data = json.loads(file.read().decode("utf-8"))
        if os.path.basename(full_path).startswith(SERVICE_MODEL) and isinstance(data, dict):
            return slim_service_model(data)
        return data


def use_slim_models(session: botocore.session.Session) -> None:
    """Make ``session`` load its models with :class:`SlimJSONFileLoader` (before any client);
    the ``data_path`` setting (``AWS_DATA_PATH``) is honoured as botocore's own loader does."""
    data_path = session.get_config_variable("data_path")
    extra = [os.path.expanduser(p) for p in data_path.split(os.pathsep)] if data_path else None
    loader = botocore.loaders.Loader(extra_search_paths=extra, file_loader=SlimJSONFileLoader())
    session.register_component("data_loader", loader)
