"""pyvmomi at one typed boundary: its dynamic type tree is ``Any`` here and nowhere else.

pyvmomi builds ``vim``/``vmodl`` types at run time and its partial stubs disagree with what
vCenter (and vcsim) accept, so the rest of the provider uses these names instead of importing
``pyVmomi`` directly.
"""

from __future__ import annotations

from typing import Any

import pyVim.connect as _connect
import pyVmomi as _pyvmomi
import pyVmomi.SoapAdapter as _soap
from pyVmomi import pbm as _pbm

vim: Any = _pyvmomi.vim
vmodl: Any = _pyvmomi.vmodl
pbm: Any = _pbm
SoapStubAdapter: Any = _soap.SoapStubAdapter
smart_connect: Any = _connect.SmartConnect
disconnect: Any = _connect.Disconnect

#: The property collector's types (FilterSpec, ObjectSpec, PropertySpec, TraversalSpec...).
PC: Any = vmodl.query.PropertyCollector
