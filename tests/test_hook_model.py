"""A model of the hook (issue 19, part 2): a hypothesis ``RuleBasedStateMachine`` that drives the
real hook entry (``vmtune.hook.main``) as libvirt calls it, on a fake host (hookhost.py: fixtures/hook.py's
sysfs with isotrees' IRQs, masks, sysctls, groups and tasks, a hugepage pool and irqbalance's
socket answered in-process), with libvirt's run dir holding a status file, a pid file and a live
process whose command line is a QEMU's for every domain that runs.

Rules: start (prepare; then QEMU launched and ``started``) and stop (QEMU gone; ``release``) of three
latency domains on CPUs 1, 2 and 3 and of one untagged domain; a crash (QEMU killed, no release),
with libvirt's status files left or removed; a kill at a write or rename inside a hook call (before
the write: a fake sysfs value keeps the value it had, as the kernel's files do), after which libvirt
does what it does (a failed start is released; a release is never repeated); a hand change of a
governor, of IRQ 1's affinity or of the workqueue mask; ``vmtune hook reap``; the clock moved past
the 2-minute grace; a libvirtd restart (``reconnect`` of every running domain).

Invariants, after every step:

- with no lease, every host value is what it was, or its hand value where it was changed by hand;
- after a start or reconnect that completed, every value is the tuned one for the leases held
  (values changed by hand during the leases aside: they are left alone);
- the leases are exactly the running (or starting) latency domains, plus those whose domain is
  gone and that no completed call could have known stale yet (the grace rule of issue 19: a lease
  whose QEMU was recorded is stale at once, one without it once the grace has passed);
- the untagged domain's calls exit 0 and change nothing; the state is always readable.

``VMTUNE_MODEL_EXAMPLES`` (default 30) and ``VMTUNE_MODEL_STEPS`` (default 40) set the run's size;
RELIABILITY.md gives the counts of a long run.
"""

from __future__ import annotations

import json
import os
from collections import Counter
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from fixtures.hookhost import build as build_host
from fixtures.hookhost import fake_task_write
from fixtures.isotrees import FakeIrqbalance, tree
from fixtures.killpoints import KILLED, killed_at
from fixtures.hook import UUID_A, UUID_B, build_sysfs, domain
from fixtures.reliability import POINTS
from fixtures.wait import wait_until

from vmtune import cli, cpuset, hook
from vmtune.host.sysfs import cpu_limit
from vmtune.hoststate import alive, document, leases
from vmtune.hoststate.kinds import base, irqbalance, tasks
from vmtune.hoststate.statedir import StateDir

UUID_C = "33333333-3333-3333-3333-333333333333"
UUID_X = "99999999-9999-9999-9999-999999999999"
LATENCY = {"vm-a": (UUID_A, "2", "latency"), "vm-b": (UUID_B, "3", "latency"), "vm-c": (UUID_C, "1", "latency")}
UNTAGGED = domain("vm-x", UUID_X, profile=None, pins="1")
ONLINE = frozenset(range(4))
RESERVED = frozenset({0})
GOVERNOR = "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"
IRQ = "proc/irq/1/smp_affinity_list"
WQ_MASK = "sys/devices/virtual/workqueue/cpumask"
HAND = {GOVERNOR: ("ondemand", "schedutil"), IRQ: ("0-3", "0,2", "0-1,3", "0,3", "0-2"),
        WQ_MASK: ("f", "5", "b", "d", "7")}
EXAMPLES = int(os.environ.get("VMTUNE_MODEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("VMTUNE_MODEL_STEPS", "40"))
kills = st.one_of(st.none(), st.none(), st.integers(0, 12), st.integers(0, 45))  # None: the call runs to its end
COUNTS: Counter = Counter()  # what a run did, printed at its end (RELIABILITY.md)




class Clock:
    """``time.time`` of the lease module and the state document, movable forward (the grace)."""

    def __init__(self):
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


def _names(path: str, key, record: dict) -> bool:
    """Whether the state file's ``record`` (under ``key``) is of the host file ``path``: IRQ 1's
    affinity (``irq:1``), the unbound workqueues' mask (``wq:cpumask``), a knob by its path."""
    return {IRQ: key == "irq:1", WQ_MASK: key == "wq:cpumask"}.get(
        path, f"sys/{record.get('path')}" == path)


class HookModel(RuleBasedStateMachine):
    DOMAINS = LATENCY  # name -> (UUID, the CPUs its vCPU is pinned to, its profile)
    CONFIG = 'reserved_cpus = "0"\n'

    def __init__(self):
        super().__init__()
        shm = Path("/dev/shm")
        self.root = root = Path(tempfile.mkdtemp(prefix="vmtune-model-", dir=shm if os.access(shm, os.W_OK) else None))
        self.mp = pytest.MonkeyPatch()
        build_sysfs(root / "sys")
        kernel = build_host(root)
        (root / "profiles").mkdir()
        (root / "libvirt").mkdir()
        (root / "vmtune.toml").write_text(self.CONFIG)
        for name, value in (("SYSFS", root / "sys"), ("STATE_DIR", root / "state"), ("CONFIG", root / "vmtune.toml"),
                            ("PROFILES", root / "profiles"), ("LIBVIRT_RUNDIR", root / "libvirt")):
            self.mp.setenv(f"VMTUNE_{name}", str(value))
        self.mp.setenv("VMTUNE_SYSLOG", "0")
        self.mp.delenv("VMTUNE_DRY_RUN", raising=False)
        self.mp.setattr(base, "write_file", kernel.write)
        self.mp.setattr(tasks.TaskAffinity, "write", fake_task_write(root / "proc"))
        self.mp.setattr(irqbalance, "request", FakeIrqbalance(root))
        self.mp.setattr(os, "fsync", lambda fd: None)  # a memory filesystem: still a kill point
        self.clock = Clock()
        fake_time = SimpleNamespace(time=self.clock.time)
        self.mp.setattr(leases, "time", fake_time)
        self.mp.setattr(document, "time", fake_time)
        self.expected = tree(root)  # the host as it must be with no lease: as found, or as set by hand
        self.hand: set[str] = set()  # files changed by hand while leases were held
        self.qemu: dict[str, subprocess.Popen] = {}
        self.status = {name: "off" for name in self.DOMAINS}  # off, prepared (starting), running
        self.files_left: set[str] = set()  # crashed domains whose status files libvirt left behind
        self.pending: set[str] = set()  # gone domains whose lease may still be held
        self.recorded: dict[str, bool | None] = {}  # its QEMU recorded in its lease (None: not known)
        self.since: dict[str, float] = {}  # the latest its lease's ``since`` can be
        self.check_tuned = False

    def teardown(self):
        COUNTS["walks"] += 1
        for proc in self.qemu.values():
            proc.kill()
            proc.wait()
        self.mp.undo()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- libvirt's side ---------------------------------------------------------------------------
    def xml(self, name: str) -> str:
        uuid, cpus, profile = self.DOMAINS[name]
        return domain(name, uuid, profile=profile, pins=cpus)

    def call(self, name: str, xml: str, op: str, sub: str, kill: int | None = None) -> int:
        argv = [name, op, sub, "-"]
        COUNTS["hook calls"] += 1
        if kill is None:
            return hook.main(argv, xml.encode())
        code = killed_at(kill, argv, xml, POINTS)
        COUNTS["calls killed" if code == KILLED else "calls with a kill point past their end"] += 1
        return code

    def launch_qemu(self, name: str) -> None:
        uuid = self.DOMAINS[name][0]
        proc = subprocess.Popen(["/bin/sh", "-c", "read _", "-name", f"guest={name},debug-threads=on", "-uuid", uuid],
                                stdin=subprocess.PIPE)
        wait_until(Path(f"/proc/{proc.pid}/cmdline").read_bytes, 30, f"{name}'s QEMU to have its command line",
                   interval=0.001)
        self.qemu[name] = proc
        folder = self.root / "libvirt"
        (folder / f"{name}.xml").write_text(f"<domstatus state='running' pid='{proc.pid}'><domain><name>{name}</name>"
                                            f"<uuid>{uuid}</uuid></domain></domstatus>\n")
        (folder / f"{name}.pid").write_text(f"{proc.pid}\n")

    def end_qemu(self, name: str, remove_files: bool = True) -> None:
        proc = self.qemu.pop(name)
        proc.kill()
        proc.wait()
        if remove_files:
            for ext in ("xml", "pid"):
                (self.root / "libvirt" / f"{name}.{ext}").unlink(missing_ok=True)

    def now(self) -> float:
        return self.clock.time()

    def reaped(self) -> None:
        """A call that reaps (prepare, release, reconnect, reap) ran to its end: every lease that was
        certainly stale is gone."""
        for name in sorted(self.pending):
            past_grace = self.now() - self.since.get(name, 0.0) >= alive.GRACE_S
            if name in self.files_left or self.recorded.get(name) is True or past_grace:
                self.pending.discard(name)

    # -- rules ------------------------------------------------------------------------------------
    def with_status(self, status: str) -> list[str]:
        return [name for name in sorted(self.DOMAINS) if self.status[name] == status]

    @precondition(lambda self: self.with_status("off"))
    @rule(pick=st.integers(0, 2), kill=kills)
    def prepare(self, pick, kill):
        COUNTS["rule prepare"] += 1
        off = self.with_status("off")
        name = off[pick % len(off)]
        for ext in ("xml", "pid"):  # libvirt cleans what a crash left before it starts the domain again
            (self.root / "libvirt" / f"{name}.{ext}").unlink(missing_ok=True)
        self.files_left.discard(name)
        code = self.call(name, self.xml(name), "prepare", "begin", kill)
        assert code in (0, KILLED), code
        if code == KILLED:  # a failed start: libvirt releases it
            assert self.call(name, self.xml(name), "release", "end") == 0
            self.pending.discard(name)
            self.reaped()
            return
        self.status[name] = "prepared"
        self.pending.discard(name)
        self.recorded[name], self.since[name] = False, self.now()
        self.reaped()
        self.check_tuned = True

    @precondition(lambda self: self.with_status("prepared"))
    @rule(pick=st.integers(0, 2), kill=kills)
    def launch(self, pick, kill):
        """QEMU runs, libvirt writes its status files, then calls ``started``."""
        COUNTS["rule launch"] += 1
        starting = self.with_status("prepared")
        name = starting[pick % len(starting)]
        self.launch_qemu(name)
        self.status[name] = "running"
        code = self.call(name, self.xml(name), "started", "begin", kill)
        assert code in (0, KILLED), code
        self.recorded[name] = True if code == 0 else None

    @precondition(lambda self: self.with_status("running"))
    @rule(pick=st.integers(0, 2), kill=kills)
    def stop(self, pick, kill):
        COUNTS["rule stop"] += 1
        running = self.with_status("running")
        name = running[pick % len(running)]
        self.end_qemu(name)
        self.status[name] = "off"
        code = self.call(name, self.xml(name), "release", "end", kill)
        assert code in (0, KILLED), code
        if code == KILLED:  # libvirt never repeats a release
            self.pending.add(name)
        else:
            self.reaped()

    @precondition(lambda self: self.with_status("running"))
    @rule(pick=st.integers(0, 2), leave_files=st.booleans())
    def crash(self, pick, leave_files):
        """QEMU dies and no release comes (libvirtd was down)."""
        COUNTS["rule crash"] += 1
        running = self.with_status("running")
        name = running[pick % len(running)]
        self.end_qemu(name, remove_files=not leave_files)
        if leave_files:
            self.files_left.add(name)
        self.status[name] = "off"
        self.pending.add(name)

    @rule(first_killed=kills)
    def restart_libvirtd(self, first_killed):
        """libvirtd comes back: ``reconnect`` for every domain it finds running; a crashed domain
        whose status files were left is reconnected, found dead, and released."""
        COUNTS["rule restart_libvirtd"] += 1
        completed, calls = True, bool(self.files_left)
        for name in sorted(self.files_left):
            assert self.call(name, self.xml(name), "reconnect", "begin") == 0
            for ext in ("xml", "pid"):
                (self.root / "libvirt" / f"{name}.{ext}").unlink(missing_ok=True)
            assert self.call(name, self.xml(name), "release", "end") == 0
            self.files_left.discard(name)
            self.pending.discard(name)
        running = [name for name in sorted(self.DOMAINS) if self.status[name] == "running"]
        for i, name in enumerate(running):
            code = self.call(name, self.xml(name), "reconnect", "begin", first_killed if i == 0 else None)
            assert code in (0, KILLED), code
            self.since[name] = self.now()
            if code == 0:
                self.recorded[name] = True
            else:
                completed = False
                self.recorded[name] = self.recorded[name] or None
        if completed and (running or calls):  # a reconnect or a release ran to its end: it reaped
            self.reaped()
            self.check_tuned = bool(running) or self.check_tuned

    @rule()
    def reap(self):
        COUNTS["rule reap"] += 1
        assert cli.main(["hook", "reap", "--quiet", "--hooks-dir", str(self.root / "no-hooks")]) == 0
        self.reaped()

    @precondition(lambda self: "prepared" not in self.status.values())  # a start never takes minutes
    @rule()
    def time_passes(self):
        COUNTS["rule time_passes"] += 1
        self.clock.offset += alive.GRACE_S + 1

    @rule(path=st.sampled_from(sorted(HAND)), pick=st.integers(0, 4))
    def hand_change(self, path, pick):
        """Someone sets a value by hand: never the value the hook would set now (that one cannot be
        told from the hook's own), never the value it has."""
        COUNTS["rule hand_change"] += 1
        held = self.held()
        tuned = {GOVERNOR: "performance", IRQ: cpuset.format(ONLINE - (held - RESERVED)),
                 WQ_MASK: format(sum(1 << c for c in ONLINE - (held - RESERVED)), "x")}[path]
        file = self.root / path
        now = file.read_text().strip()
        choices = [v for v in HAND[path] if v not in (now, tuned, *self.in_flight(path))]
        if not choices:
            return
        value = choices[pick % len(choices)]
        file.write_text(value + "\n")
        self.expected[path] = value
        if held:
            self.hand.add(path)

    @rule(kill_none=st.just(None))
    def untagged_domain(self, kill_none):
        COUNTS["rule untagged_domain"] += 1
        before, state = tree(self.root), self.state_bytes()
        for op, sub in (("prepare", "begin"), ("started", "begin"), ("release", "end")):
            assert self.call("vm-x", UNTAGGED, op, sub) == 0
        assert tree(self.root) == before and self.state_bytes() == state

    # -- what is checked --------------------------------------------------------------------------
    def state_bytes(self) -> bytes | None:
        path = self.root / "state" / "state.json"
        return path.read_bytes() if path.exists() else None

    def leases(self) -> dict:
        raw = self.state_bytes()
        return json.loads(raw)["leases"] if raw is not None else {}

    def in_flight(self, path: str) -> set[str]:
        """The values a killed call journaled for ``path`` and may or may not have written (a record
        with a ``from``): a hand that writes one cannot be told from the hook's own write either."""
        file = self.root / "state" / "state.json"
        if not file.exists():
            return set()
        found: set[str] = set()

        def walk(node, key=None):
            if isinstance(node, dict):
                if "from" in node and "after" in node and _names(path, key, node):
                    found.add(str(node["after"]).strip())
                for k, v in node.items():
                    walk(v, k)
            elif isinstance(node, list):
                for v in node:
                    walk(v, key)
        walk(json.loads(file.read_text()))
        return found

    def held(self) -> frozenset[int]:
        return frozenset().union(*(cpuset.parse(lease["cpus"]) for lease in self.leases().values()))

    @invariant()
    def the_state_is_readable(self):
        folder = self.root / "state"
        if folder.exists():
            StateDir(str(folder), dry_run=True, sysfs=str(self.root / "sys"),
                     limit=cpu_limit(str(self.root / "sys"))).read()

    @invariant()
    def the_leases_are_the_running_domains(self):
        names = {lease["name"] for lease in self.leases().values()}
        certain = {name for name, status in self.status.items() if status != "off"}
        assert certain <= names <= certain | self.pending, (names, certain, self.pending)

    @invariant()
    def with_no_lease_the_host_is_as_found(self):
        if self.leases():
            return
        self.hand.clear()
        now = tree(self.root)
        assert {k: (v, now.get(k)) for k, v in self.expected.items() if now.get(k) != v} == {}

    @invariant()
    def after_a_start_every_value_is_tuned(self):
        if not self.check_tuned:
            return
        self.check_tuned = False
        held = self.held() - RESERVED
        sysfs = self.root / "sys"
        if self.POWER:
            self.each_cpu_is_its_owners()
        else:
            for cpu in ONLINE:
                rel = f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
                if rel not in self.hand:
                    assert (self.root / rel).read_text().strip() == "performance", rel
                assert (sysfs / f"devices/system/cpu/cpu{cpu}/cpuidle/state3/disable").read_text().strip() == "1", cpu
        assert (sysfs / "kernel/mm/ksm/run").read_text().strip() == "0"
        if IRQ not in self.hand:
            assert not held & cpuset.parse((self.root / IRQ).read_text()), (IRQ, held)
        if WQ_MASK not in self.hand:
            mask = int((self.root / WQ_MASK).read_text(), 16)
            assert not any(mask >> cpu & 1 for cpu in held), (WQ_MASK, held)
        for status in (self.root / "proc").glob("*/task/*/status"):
            assert not held & cpuset.parse(status.read_text().rsplit("\t", 1)[1]), status


    POWER = False  # [hook] power_scope = "pinned" (PowerModel)

    def each_cpu_is_its_owners(self):
        """Power scope pinned: a held CPU is as its earliest lease's profile says (governor
        performance, the C-states above its cap disabled), every other CPU as found (or as set by hand)."""
        owner: dict[int, str] = {}
        for _, lease in sorted(self.leases().items(), key=lambda kv: (kv[1]["since"], kv[0])):
            for cpu in cpuset.parse(lease["cpus"]):
                owner.setdefault(cpu, lease["profile"])
        for cpu in ONLINE:
            rel = f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
            disabled = "".join((self.root / f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}/disable").read_text().strip()
                               for k in range(4))
            if rel not in self.hand:
                assert (self.root / rel).read_text().strip() == ("performance" if cpu in owner else self.expected[rel]), rel
            assert disabled == (OFF_STATES[owner[cpu]] if cpu in owner else "0000"), (cpu, owner)


# C-states 0-3 (0, 2, 10, 133 us) as each profile's cap leaves them: 1 disabled
OFF_STATES = {"latency": "0001", "realtime": "0111"}


class PowerModel(HookModel):
    """The same walks with ``power_scope = "pinned"``: vm-c, a realtime domain on CPUs 1-2, overlaps
    vm-a (latency, CPU 2); each CPU is its earliest lease's, as its profile says."""

    DOMAINS = {**LATENCY, "vm-c": (UUID_C, "1-2", "realtime")}
    CONFIG = 'reserved_cpus = "0"\n[hook]\npower_scope = "pinned"\non_conflict = "warn"\n'
    POWER = True


def test_the_hook_against_a_model_of_libvirt():
    """Random walks of libvirt's calls, kills, crashes, hand changes, reaps and time (see the module)."""
    run_state_machine_as_test(HookModel, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    print("reliability: the hook's model: " + ", ".join(f"{n} {what}" for what, n in sorted(COUNTS.items())))
    assert COUNTS["calls killed"] > 0 and COUNTS["hook calls"] > EXAMPLES * 5  # the walks did walk


def test_power_per_lease_against_the_model():
    """The model's walks with power scoped to each lease, two of them overlapping with two profiles."""
    before = COUNTS["calls killed"]
    run_state_machine_as_test(PowerModel, settings=settings(
        max_examples=max(EXAMPLES // 2, 5), stateful_step_count=STEPS, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    assert COUNTS["calls killed"] > before
