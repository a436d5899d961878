"""What the `jsonschema` package finds at fault, as vmtune.schema.errors names it, and the keywords
a schema uses (both compared with vmtune.schema, the mini validator)."""

from __future__ import annotations


def jsonschema_paths(validator, data) -> set[str]:
    """The dotted keys ``validator`` finds at fault (an unexpected key counts at its own path)."""
    out = set()
    for error in validator.iter_errors(data):
        base = [str(p) for p in error.absolute_path]
        if error.validator == "additionalProperties" and error.validator_value is False:
            known = error.schema.get("properties", {})
            out |= {".".join(base + [key]) for key in error.instance if key not in known}
        else:
            out.add(".".join(base))
    return out


def keywords(node) -> set[str]:
    """Every keyword used in a schema, recursing into properties and sub-schemas."""
    out = set(node)
    for sub in node.get("properties", {}).values():
        out |= keywords(sub)
    if isinstance(node.get("additionalProperties"), dict):
        out |= keywords(node["additionalProperties"])
    return out
