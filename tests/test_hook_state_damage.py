"""The hook's state and inputs (vmtune/hoststate/document.py, statedir.py, vmtune/hook), against the
ways they go wrong in the field (issue 10).

Each test states what the issue (or the developers' guide) requires; each failed before the fixes
of the issue-10 audit. They use fixtures/reliability.py's fake host (sysfs, IRQs, cgroups, libvirt run
dir).
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import subprocess
import sys

import pytest
from fixtures.isotrees import tree
from fixtures.hook import A, B, HOOK, UUID_A, UUID_B, call, domain, state
from fixtures.reliability import lv

from vmtune import cli
from vmtune.hoststate.kinds import base

GOVERNOR = "devices/system/cpu/cpu1/cpufreq/scaling_governor"


def _edit(host, change) -> None:
    path = host / "state" / "state.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _drop(*keys):
    def change(doc):
        node = doc
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]
    return change


# 1. A state.json that lost a key is read as an empty (or emptier) state: fail open --------------------

LOST = {
    "the document is {}": lambda d: (d.clear()),
    "only version left": lambda d: [d.pop(k) for k in list(d) if k != "version"],
    "no baseline key": _drop("baseline"),
    "no isolation key": _drop("isolation"),
    "a lease without cpus": _drop("leases", UUID_A, "cpus"),
}


@pytest.mark.parametrize("kind", LOST)
def test_a_state_that_lost_a_key_is_damage(running_host_tree, kind):
    """Issue 10, "Fail closed on damage": the original values are never lost. The writer always
    writes version/leases/baseline (and isolation while anything is isolated); a document without
    them, read while vm-a runs on a tuned host, must be damage (vm-b refused), not an empty state
    from which vm-b records a new baseline off the tuned host."""
    before = tree(running_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    lv().start("vm-a", UUID_A)
    _edit(running_host_tree, LOST[kind])
    rc = call(B, "vm-b", "prepare", "begin")
    lv().stop("vm-a")
    call(B, "vm-b", "release", "end"), call(A, "vm-a", "release", "end")
    assert rc == 1, f"{kind}: a latency start went on over a damaged state"
    assert cli.main(["hook", "reap"]) == 0  # goes on from baseline.json, as for the other damage kinds
    assert tree(running_host_tree) == before


def test_cstates_key_lost_with_scope_pinned(running_host_tree):
    (running_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\ncstate_scope = "pinned"\n')
    assert call(A, "vm-a", "prepare", "begin") == 0
    lv().start("vm-a", UUID_A)
    _edit(running_host_tree, _drop("leases", UUID_A, "cstates"))
    assert call(B, "vm-b", "prepare", "begin") == 1  # damage: vm-a's C-state records are gone


# 2. A restore the kernel refuses once drops the record: the original value is lost for good ----------

def _governor_busy(monkeypatch):
    """Writes to cpu1's governor fail with EBUSY from now on; returns the real writer."""
    real = base.write_file

    def busy(sysfs, rel, value):
        if rel == GOVERNOR:
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(sysfs, rel, value)

    monkeypatch.setattr(base, "write_file", busy)
    return real


def test_a_restore_that_fails_once_is_tried_again(running_host_tree, monkeypatch):
    """Issue 10: "The original values are never lost". A knob whose restore write fails (EBUSY)
    must keep its record, as an isolation record does, so that a later call restores it."""
    before = tree(running_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    real = _governor_busy(monkeypatch)
    assert call(A, "vm-a", "release", "end") == 0
    monkeypatch.setattr(base, "write_file", real)
    assert call(A, "vm-a", "prepare", "begin") == 0  # the next cycle, the kernel takes writes again
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(running_host_tree) == before  # cpu1's governor too, restored by the next call


# 3. A name libvirt accepts with surrounding whitespace: the running domain's lease is reaped ------------

@pytest.mark.parametrize("name", [" vm-a", "vm-a\t"])
def test_a_running_domain_whose_name_has_outer_whitespace_is_not_reaped(running_host_tree, monkeypatch, name):
    """libvirt only forbids a newline in <name>; its status file is NAME.xml with the exact name.
    The hook strips the name (model.Prop), looks for "vm-a.xml", and reaps a running domain."""
    xml = domain(name, UUID_A, pins="2")
    assert call(xml, name, "prepare", "begin") == 0
    lv().start(name, UUID_A)
    assert call(B, "vm-b", "prepare", "begin") == 0  # host fixture: GRACE_S = 0
    assert UUID_A in state(running_host_tree)["leases"]


# 4. A knob path inside sysfs that vmtune never writes is trusted --------------------------------------

def test_a_knob_path_vmtune_never_writes_is_damage(running_host_tree):
    """"Every path read from the state file must resolve inside its root, or it is damage", and the
    validator's own message says "not a sysfs path vmtune writes"; but any file under
    devices/system/cpu/ passes: a baseline record for cpu1/online takes CPU 1 offline at release."""
    online = running_host_tree / "sys" / "devices/system/cpu/cpu1/online"
    online.write_text("1\n")
    assert call(A, "vm-a", "prepare", "begin") == 0
    _edit(running_host_tree, lambda d: d["baseline"].append({"path": "devices/system/cpu/cpu1/online", "before": "0",
                                                  "after": "1"}))
    call(A, "vm-a", "release", "end")
    assert online.read_text().strip() == "1"


# 5. lock_timeout_s = nan passes the schema and the wait is unbounded -----------------------------------

def _prepare_in_child(q):
    q.put(call(A, "vm-a", "prepare", "begin"))


def test_a_nan_lock_timeout_does_not_wait_forever(running_host_tree):
    """Issue 10, "Bounded": the lock wait has a cap. TOML's nan passes the schema's minimum and
    maximum (NaN compares false), and ``monotonic() >= now + nan`` is never true."""
    import fcntl

    (running_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\nlock_timeout_s = nan\n')
    (running_host_tree / "state").mkdir(mode=0o755)
    fd = os.open(running_host_tree / "state" / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_prepare_in_child, args=(q,))
    proc.start()
    proc.join(20)  # generous: the default cap is 30 s, nan should be refused at once
    alive = proc.is_alive()
    if alive:
        proc.kill()
        proc.join()
    os.close(fd)
    assert not alive, "the hook still waits for the lock after 20 s"


# 6. A broken vmtune.env stops domains vmtune does not manage ------------------------------------------

@pytest.mark.parametrize("profile", [None, "throughput"])
def test_an_unreadable_env_file_never_stops_a_domain_vmtune_does_not_tune(running_host_tree, tmp_path, profile):
    """"A hook bug must never stop a VM that vmtune does not manage from starting." main() calls
    load_env_file() outside its try; a vmtune.env that is not UTF-8 raises UnicodeDecodeError (only
    OSError is caught): traceback, exit 1 for any domain whose XML holds the vmtune URL (an
    untagged domain that mentions it in its <description>, a throughput-tagged one)."""
    hooks = tmp_path / "hooks"
    (hooks / "qemu.d").mkdir(parents=True)
    script = hooks / "qemu.d" / "50-vmtune"
    shutil.copy(HOOK, script)
    (hooks / "vmtune.env").write_bytes(b"# r\xe9glages\nVMTUNE_SYSLOG=0\n")
    xml = domain("plain", UUID_B, profile=profile)
    if profile is None:
        xml = xml.replace("<memory", "<description>see https://vmtune.dev/xmlns/1</description><memory")
    done = subprocess.run([sys.executable, str(script), "plain", "prepare", "begin", "-"], input=xml.encode(),
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-300:]


def test_the_doctor_warns_of_a_value_not_restored_yet(running_host_tree, monkeypatch):
    """What a refused restore left is a WARN in ``vmtune doctor``'s state area until it is restored."""
    from vmtune.doctor import hookstate as doctor_state
    from vmtune.doctor.findings import Context, Roots

    assert call(A, "vm-a", "prepare", "begin") == 0
    _governor_busy(monkeypatch)
    assert call(A, "vm-a", "release", "end") == 0
    assert [r["path"] for r in state(running_host_tree)["unrestored"]] == [GOVERNOR]
    here = Roots.from_env(os.environ)  # the state: $VMTUNE_STATE_DIR
    ctx = Context(Roots.given(sysfs=str(running_host_tree / "sys"), root="/", here=here))
    found = [f for f in doctor_state.check(ctx) if f.level == "WARN" and "not restored yet" in f.found]
    assert found and GOVERNOR in found[0].found


def test_a_qemu_pid_now_a_kernel_threads_is_stale(tmp_path):
    """A lease whose QEMU pid was reused by a kernel thread (no command line, ever) is stale; a
    process with an empty command line that is not a kernel thread may be starting: not stale."""
    from vmtune.hoststate import alive

    folder = tmp_path / "qemu"
    folder.mkdir()
    (folder / "vm-a.xml").write_text(f"<domstatus><domain><uuid>{UUID_A}</uuid></domain></domstatus>")
    proc = tmp_path / "proc"
    for pid, flags in (("4242", 0x00200040), ("4343", 0x00400100)):  # kthread; a user task
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(b"")
        (proc / pid / "stat").write_text(f"{pid} (kworker/0:1) I 2 0 0 0 -1 {flags} 0 0 0 0\n")
    (folder / "vm-a.pid").write_text("4242")
    why = alive.why_stale(str(folder), str(proc), UUID_A, "vm-a", 0.0, 1000.0)
    assert why and "kernel thread" in why
    (folder / "vm-a.pid").write_text("4343")
    assert alive.why_stale(str(folder), str(proc), UUID_A, "vm-a", 0.0, 1000.0) is None
    if os.path.exists("/proc/2/stat"):  # kthreadd, on this machine's real /proc
        (folder / "vm-a.pid").write_text("2")
        assert "kernel thread" in (alive.why_stale(str(folder), "/proc", UUID_A, "vm-a", 0.0, 1000.0) or "")
