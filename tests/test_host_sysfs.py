"""vmtune/host/: one home for the sysfs and proc readers, and a package with no import circle.

The hook, the doctor and ``Host.from_sysfs`` read the host through host/sysfs.py, so each rule
(which CPUs are online, what a meminfo line says, which hugepage size is the default) is written
once and all three agree.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.sources import parsed

from vmtune.doctor.findings import Context, Roots
from vmtune.host.sysfs import cpu_limit
from vmtune.hoststate import pages as hugepages
from vmtune.hoststate.kinds import read_file
from vmtune.host import sysfs as files

PACKAGE = Path(__file__).resolve().parents[1] / "vmtune"
CPU_DIR = "devices/system/cpu"


def put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def sysfs(tmp_path) -> Path:
    """A sysfs root whose cpu directory has cpu0..cpu3 (and cpufreq, cpuidle, which are no CPUs)."""
    root = tmp_path / "sys"
    for name in ("cpu0", "cpu1", "cpu2", "cpu3", "cpufreq", "cpuidle"):
        (root / CPU_DIR / name).mkdir(parents=True)
    return root


@pytest.mark.parametrize("online, want", [
    ("1-2\n", [1, 2]),
    ("0,2 3\n", [0, 2, 3]),
    ("zero\n", [0, 1, 2, 3]),
    ("\n", [0, 1, 2, 3]),
    (None, [0, 1, 2, 3]),
], ids=["list", "spaces", "garbled", "empty", "missing"])
def test_hook_and_doctor_see_the_same_online_cpus(sysfs, online, want):
    """The online CPUs are the ``online`` file's, else the cpuN directories, for the hook and the doctor alike."""
    if online is not None:
        put(sysfs, f"{CPU_DIR}/online", online)
    assert files.online_cpus(str(sysfs)) == want
    assert Context(Roots.given(sysfs=str(sysfs))).cpus() == want


def test_cpu_limit_counts_every_cpu_list_and_directory(sysfs):
    """One past the highest CPU the kernel names anywhere; a garbled list does not hide the others."""
    put(sysfs, f"{CPU_DIR}/possible", "0-7\n")
    put(sysfs, f"{CPU_DIR}/present", "garbage\n")
    put(sysfs, f"{CPU_DIR}/online", "0-3\n")
    (sysfs / CPU_DIR / "cpu5").mkdir()
    assert cpu_limit(str(sysfs)) == 8
    os.remove(sysfs / CPU_DIR / "possible")
    assert cpu_limit(str(sysfs)) == 6
    assert cpu_limit(str(sysfs / "none")) == 8192


def test_knob_read_is_none_only_for_a_missing_file(sysfs):
    """The hook's knob reader: a missing file is None; any other failure is raised, not taken for absent."""
    assert read_file(str(sysfs), "kernel/mm/ksm/run") is None
    with pytest.raises(IsADirectoryError):
        read_file(str(sysfs), f"{CPU_DIR}/cpu0")
    assert files.value(str(sysfs / CPU_DIR / "cpu0")) is None


def test_default_hugepage_size(tmp_path):
    """``Hugepagesize`` in meminfo, else the smallest pool, else 2 MiB (the hook's default)."""
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    for size in (1048576, 2048, 64):
        (sysfs / f"kernel/mm/hugepages/hugepages-{size}kB").mkdir(parents=True)
    (sysfs / "kernel/mm/hugepages/hugepages-xkB").mkdir()
    put(proc, "meminfo", "MemTotal:       32000000 kB\nHugepagesize:    1048576 kB\n")
    assert files.default_page_kib(str(sysfs), str(proc)) == 1048576
    put(proc, "meminfo", "MemTotal:       32000000 kB\n")
    assert files.default_page_kib(str(sysfs), str(proc)) == 64
    assert hugepages.default_size(Roots.from_env({}, str(sysfs))) == 64  # proc beside the sysfs root
    assert files.default_page_kib(str(tmp_path / "none"), str(proc)) is None
    assert hugepages.default_size(Roots.from_env({}, str(tmp_path / "none" / "sys"))) == hugepages.DEFAULT_SIZE_KIB


def test_meminfo_proc_and_node_forms(tmp_path):
    """``MemTotal:`` of /proc/meminfo and of a node's ``Node 0 MemTotal:``; None when absent."""
    put(tmp_path, "meminfo", "MemTotal:  1000 kB\nMemFree:  10 kB\n")
    put(tmp_path, "node0", "Node 0 MemTotal:  2000 kB\nNode 0 MemFree:  20 kB\n")
    assert files.meminfo_kib(str(tmp_path / "meminfo")) == 1000
    assert files.meminfo_kib(str(tmp_path / "node0")) == 2000
    assert files.meminfo_kib(str(tmp_path / "node0"), "MemFree:") == 20
    assert files.meminfo_kib(str(tmp_path / "node0"), "Hugepagesize:") is None
    assert files.meminfo_kib(str(tmp_path / "missing")) is None


def test_cpuinfo_and_vendor(tmp_path):
    """/proc/cpuinfo as a dict per processor; the vendor of the first that names one."""
    put(tmp_path, "cpuinfo", "processor\t: 0\nmodel name\t: Xeon: E5\nflags\t\t: fpu aperfmperf\n\n"
                             "processor\t: 1\nvendor_id\t: AuthenticAMD\nno colon here\n\n")
    entries = files.cpuinfo(str(tmp_path))
    assert entries == [{"processor": "0", "model name": "Xeon: E5", "flags": "fpu aperfmperf"},
                       {"processor": "1", "vendor_id": "AuthenticAMD"}]
    assert files.vendor(str(tmp_path)) == "AMD"
    assert files.cpuinfo(str(tmp_path / "none")) == [] and files.vendor(str(tmp_path / "none")) is None


def test_pools_read_one_leaf_per_size(tmp_path):
    """``hugepages-<size>kB/<leaf>`` per size; a pool whose file is missing or garbled is left out."""
    put(tmp_path, "hugepages-2048kB/free_hugepages", "7\n")
    put(tmp_path, "hugepages-2048kB/nr_hugepages", "9\n")
    put(tmp_path, "hugepages-1048576kB/free_hugepages", "lots\n")
    put(tmp_path, "hugepages-64kB/nr_hugepages", "1\n")
    assert files.pools(str(tmp_path)) == {2048: 7}
    assert files.pools(str(tmp_path), "nr_hugepages") == {2048: 9, 64: 1}
    assert files.pools(str(tmp_path / "none")) == {}


# -- the package's imports -------------------------------------------------------------------------
def _module_names() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def _imports(name: str, path: Path, modules) -> set[str]:
    """The vmtune modules that module ``name`` imports in any import statement (inside functions
    too). ``from P import M`` of a module M imports P.M (P only as the package Python loads first)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names = {f"{module}.{a.name}" for a in node.names}
            found |= names & modules.keys() if names <= modules.keys() else names & modules.keys() | {module}
    return found & modules.keys() - {name}


def _graph() -> dict[str, set[str]]:
    modules = _module_names()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_host_modules_import_no_circle():
    """No module of vmtune/host reaches itself again through what it imports, even inside functions:
    the loaders never import the topology they feed."""
    graph = _graph()
    for start in (m for m in graph if m == "vmtune.host" or m.startswith("vmtune.host.")):
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            assert module != start, f"{start} imports itself back"
            if module not in seen:
                seen.add(module)
                todo += graph[module]
    assert "vmtune.host.topology" not in graph["vmtune.host.sysfs"] | graph["vmtune.host.capabilities"]


def test_the_hook_loads_neither_the_host_model_nor_subprocess():
    """What a hook release imports reads sysfs through host/sysfs.py and leaves the model, the
    capabilities loader, platform and subprocess unloaded."""
    code = "import sys, vmtune.hoststate.leases; print(' '.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "vmtune.host.sysfs" in loaded
    assert not {"vmtune.host.topology", "vmtune.host.capabilities", "platform", "subprocess"} & set(loaded)
