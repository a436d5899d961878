"""The map example of README.md (``scripts/map-example``): what it is made of, and its files.

Three domains on the example host ``examples/hosts/2node-smt.xml``, each rewritten with the
claims of those before it, as ``vmtune rewrite --claim`` does: ``stock-latency.xml`` and
``db-4vcpu.xml`` with the latency profile, ``batch-4vcpu.xml`` with balanced. ``files(root)`` is
every file the example consists of, by path, as it should read now; ``python -m
vmtune.hostmap.example ROOT`` writes the ones that differ.
"""

from __future__ import annotations

import os
import re
import sys

from ..atomic import write_atomic
from ..driver import rewrite
from ..host import Host
from . import build, svg, text

HOST = "examples/hosts/2node-smt.xml"
DOMAINS = (("examples/stock-latency.xml", "latency", "examples/map/web.xml"),
           ("examples/db-4vcpu.xml", "latency", "examples/map/db.xml"),
           ("examples/batch-4vcpu.xml", "balanced", "examples/map/batch.xml"))
SVG = "docs/map-example.svg"
README = "README.md"
COMMAND = ("vmtune map --host examples/hosts/2node-smt.xml "
           + " ".join(f"--claim {out}" for _, _, out in DOMAINS))
BLOCK = re.compile(r"(<!-- map-example -->\n```text\n).*?(```\n)", re.S)


def _read(root: str, path: str) -> str:
    with open(os.path.join(root, path), encoding="utf-8") as fh:
        return fh.read()


def files(root: str) -> dict[str, str]:
    """Path (under ``root``) -> the text it should have."""
    host = Host.from_capabilities(_read(root, HOST))
    out: dict[str, str] = {}
    for source, profile, target in DOMAINS:
        out[target] = rewrite(_read(root, source), host, profile, list(out.values())).xml
    hostmap = build.build(host, [(xml, "claim") for xml in out.values()])
    out[SVG] = svg.render(hostmap)
    view = "\n".join([f"$ {COMMAND}"] + text.render(hostmap)) + "\n"
    readme = _read(root, README)
    out[README] = BLOCK.sub(lambda m: m.group(1) + view + m.group(2), readme)
    return out


def main(root: str) -> int:
    for path, content in files(root).items():
        full = os.path.join(root, path)
        try:
            same = _read(root, path) == content
        except FileNotFoundError:
            same = False
        if not same:
            os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
            write_atomic(full, content)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
