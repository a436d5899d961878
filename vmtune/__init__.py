"""vmtune: make KVM guests fast.

    import vmtune
    host = vmtune.Host.probe()                       # or Host.from_capabilities(xml)
    result = vmtune.rewrite(open("dom.xml").read(), host, profile="latency")
    print(result.xml)
    for change in result.changes:
        print(change.element, change.reason)
"""

from .config import Config
from .config import load as load_config
from .edits import Change
from .errors import DoesNotFit, InvalidInput, Unsupported, VmtuneError
from .host import Cell, Cpu, Host
from .placement import Placement
from .profiles import Profile
from .profiles import load as load_profile
from .rewrite import Result, rewrite

__version__ = "0.1.0"

__all__ = [
    "Cell", "Change", "Config", "Cpu", "DoesNotFit", "Host", "InvalidInput", "Placement",
    "Profile", "Result", "Unsupported", "VmtuneError", "load_config", "load_profile", "rewrite",
]
