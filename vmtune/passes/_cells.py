"""Guest NUMA cells rebuilt by the numa pass: which old cell went where, and what follows them.

When the latency profile merges or renumbers guest cells, everything that names a cell must
follow: a memory device's ``<target><node>`` (dimm, nvdimm, virtio-mem, virtio-pmem, sgx-epc), a
PCI expander bus's ``<target><node>``, and the cell attributes a device relies on (``memAccess=
'shared'`` for vhost-user and virtiofs, ``discard``) survive a merge.
"""

from ..edits import Set

CELL_ATTRS = ("memAccess", "discard")
# when merged cells disagree, the value a device may depend on wins
WINS = {"memAccess": ("shared", "private"), "discard": ("yes", "no")}
REFS = ("devices/memory/target", "devices/controller/target")


def remap(old_cells, new_cells) -> dict[int, int]:
    """Old guest cell id -> the new cell that holds most of its vCPUs (a cell without vCPUs keeps
    its id when the new cells have it, else goes to the first)."""
    ids = [c.id for c in new_cells]
    out = {}
    for old in old_cells:
        overlap = max(new_cells, key=lambda c: (len(old.cpus & frozenset(c.vcpus)), -c.id))
        if old.cpus & frozenset(overlap.vcpus):
            out[old.id] = overlap.id
        else:
            out[old.id] = old.id if old.id in ids else ids[0]
    return out


def merged_attrs(old_cells, mapping: dict[int, int], new_id: int) -> dict[str, str]:
    """The attributes of new cell ``new_id``: from every old cell merged into it."""
    sources = [c.node for c in old_cells if mapping.get(c.id) == new_id]
    out = {}
    for attr in CELL_ATTRS:
        values = {s.get(attr) for s in sources if s.get(attr)}
        if len(values) == 1:
            out[attr] = values.pop()
        elif values:
            out[attr] = next((v for v in WINS[attr] if v in values), sorted(values)[0])
    return out


def follow(dom, mapping: dict[int, int]) -> list[Set]:
    """Point every ``<target><node>`` at the cell its old cell became."""
    edits = []
    for path in REFS:
        for target in dom.iter(path):
            node = target.find("node")
            text = (node.text or "").strip() if node is not None else ""
            if text.isdigit() and mapping.get(int(text), int(text)) != int(text):
                new = mapping[int(text)]
                edits.append(Set(target, "node", str(new), f"guest cell {text} is now part of cell {new}"))
    return edits
