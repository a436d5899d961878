"""Checking TOML data against the JSON Schemas in vmtune/schemas/.

Only the keywords those schemas use are supported (type, enum, properties,
additionalProperties: false, minimum, maximum, pattern); a test checks the shipped
schemas stay inside that subset and agree with the ``jsonschema`` package.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path

from .errors import InvalidInput

# the package's own files (importlib.resources would cost the hook ~13 ms of zipfile/tempfile imports)
_HERE = Path(__file__).resolve().parent

SUPPORTED = {
    "$schema", "$id", "title", "description", "type", "enum", "properties",
    "additionalProperties", "minimum", "maximum", "pattern", "default",
}
_TYPES = {
    "object": dict, "string": str, "boolean": bool, "integer": int, "number": (int, float), "array": list,
}


@cache
def load(name: str) -> dict:
    return json.loads((_HERE / "schemas" / name).read_text("utf-8"))


def errors(value: object, schema: dict, where: str = "") -> list[tuple[str, str]]:
    """Return (dotted key, message) for each way ``value`` breaks ``schema``."""
    out: list[tuple[str, str]] = []
    kind = schema.get("type")
    if kind is not None:
        want = _TYPES[kind]
        if not isinstance(value, want) or (kind in ("integer", "number") and isinstance(value, bool)):
            return [(where, f"must be {kind}, not {type(value).__name__}")]
        if kind == "number" and not math.isfinite(value):  # TOML has nan and inf; no bound compares with nan
            return [(where, f"must be a finite number, not {value}")]
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(json.dumps(v) for v in schema["enum"])
        return [(where, f"must be one of {choices}, not {json.dumps(value)}")]
    if "minimum" in schema and value < schema["minimum"]:
        out.append((where, f"must be >= {schema['minimum']}"))
    if "maximum" in schema and value > schema["maximum"]:
        out.append((where, f"must be <= {schema['maximum']}"))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        out.append((where, f"does not match {schema['pattern']}"))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, sub in value.items():
            path = f"{where}.{key}" if where else key
            extra = schema.get("additionalProperties", True)
            if key in props:
                out.extend(errors(sub, props[key], path))
            elif extra is False:
                out.append((path, "is not a known key"))
            elif isinstance(extra, dict):
                out.extend(errors(sub, extra, path))
    return out


def _keys(text: str) -> list[str]:
    return [k.strip().strip("\"'") for k in text.split(".")]


def line_of(text: str, dotted: str) -> int | None:
    """The line where ``dotted`` is set in TOML ``text``, following [table] headers (best effort).

    Falls back to the line of the nearest enclosing key (an inline table, a dotted key).
    """
    want = dotted.split(".")
    table: list[str] = []
    best: tuple[int, int] | None = None  # (matched parts, line)
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[+\s*([^\]]+?)\s*\]+\s*(#.*)?$", line)
        if header:
            table = _keys(header.group(1))
            full = table
        else:
            assign = re.match(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=", line)
            if not assign:
                continue
            full = table + _keys(assign.group(1))
        if full == want:
            return number
        if full == want[: len(full)] and (best is None or len(full) > best[0]):
            best = (len(full), number)
    return best[1] if best else None


def check(data: dict, schema_name: str, text: str, source: str) -> None:
    """Raise InvalidInput naming ``source`` and the line of the first schema error."""
    problems = errors(data, load(schema_name))
    if problems:
        key, message = problems[0]
        line = line_of(text, key) if key else None
        at = f"{source}:{line}" if line else source
        raise InvalidInput(f"{at}: {key or 'document'} {message}")
