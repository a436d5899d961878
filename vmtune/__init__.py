"""vmtune: make KVM guests fast.

    import vmtune
    host = vmtune.Host.probe()                       # or Host.from_capabilities(xml)
    result = vmtune.rewrite(open("dom.xml").read(), host, profile="latency")
    print(result.xml)
    for change in result.changes:
        print(change.element, change.reason)
    picture = vmtune.host_map(host, [(result.xml, "running")])   # vmtune map's model: .to_dict()

The names below are imported on first use, so that ``vmtune.hook`` (run by libvirt for every
domain start) loads only the modules it needs.
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "Cell": ("host", "Cell"), "Cpu": ("host", "Cpu"), "Host": ("host", "Host"), "L3": ("host", "L3"),
    "load_nodedevs": ("host.nodedev", "load"),
    "Change": ("xml.edits", "Change"), "Config": ("config", "Config"), "load_config": ("config", "load"),
    "DoesNotFit": ("errors", "DoesNotFit"), "InvalidInput": ("errors", "InvalidInput"),
    "Unsupported": ("errors", "Unsupported"), "Unavailable": ("errors", "Unavailable"),
    "VmtuneError": ("errors", "VmtuneError"),
    "Placement": ("placement.search", "Placement"), "Profile": ("profiles", "Profile"),
    "load_profile": ("profiles", "load"), "Result": ("driver", "Result"), "rewrite": ("driver", "rewrite"),
    "untune": ("driver", "untune"), "Untuned": ("driver", "Untuned"),
    "HostMap": ("hostmap.build", "HostMap"), "host_map": ("hostmap.build", "build"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'vmtune' has no attribute {name!r}") from None
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
