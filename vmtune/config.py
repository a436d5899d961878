"""The host's choices: /etc/vmtune/vmtune.toml (or --config, or $VMTUNE_CONFIG)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field

from . import cpuset, schema
from .errors import InvalidInput

DEFAULT_PATH = "/etc/vmtune/vmtune.toml"


@dataclass(frozen=True)
class Config:
    reserved_cpus: frozenset[int] | None = None  # None: Host.default_reserved() (Host.reserved applies it)
    placement: str = "spread"
    profiles_dir: str | None = None
    smt: dict[str, str] = field(default_factory=dict)
    hook: dict[str, object] = field(default_factory=dict)
    source: str | None = None

    __hash__ = object.__hash__


def load(path: str | None = None) -> Config:
    """Read the config; a missing file is the defaults, a malformed one an error naming the line."""
    explicit = path or os.environ.get("VMTUNE_CONFIG")
    where = explicit or DEFAULT_PATH
    try:
        with open(where, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        if explicit:
            raise InvalidInput(f"config file {where} does not exist") from None
        return Config()
    except OSError as exc:
        raise InvalidInput(f"cannot read config {where}: {exc.strerror}") from None
    text = raw.decode("utf-8", errors="replace")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    schema.check(data, "config.schema.json", text, where)
    reserved = data.get("reserved_cpus")
    try:
        reserved_cpus = cpuset.parse(reserved) if reserved is not None else None
    except InvalidInput as exc:
        line = schema.line_of(text, "reserved_cpus")
        raise InvalidInput(f"{where}:{line}: reserved_cpus: {exc}" if line else f"{where}: {exc}") from None
    return Config(
        reserved_cpus=reserved_cpus,
        placement=data.get("placement", "spread"),
        profiles_dir=data.get("profiles_dir"),
        smt=dict(data.get("smt", {})),
        hook=dict(data.get("hook", {})),
        source=where,
    )
