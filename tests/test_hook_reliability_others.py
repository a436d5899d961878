"""The hook's leases under kills (vmtune/hoststate/leases.py), beyond test_hook_reliability's sweep,
which kills only the first and only lease's prepare and the last lease's release. These kill a
*second* domain's prepare (vm-a holds a lease) and a *non-last* release (vm-b still holds one), then
every order of what may follow, and check that the end is exact with no lease, and that each
prepare/reconnect leaves the host tuned."""

from __future__ import annotations

from collections import Counter

import pytest
from fixtures.hookhost import Libvirt  # noqa: F401
from fixtures.killpoints import KILLED, killed_at
from fixtures.isotrees import tree
from fixtures.hook import UUID_A, UUID_B, call
from fixtures.reliability import POINTS, SA, SB, clean, lv, orders, release, tuned_for_every_lease

from vmtune.hoststate import alive

SB_PAGES = SB.replace("<vcpu>", "<memoryBacking><hugepages><page size='2048' unit='KiB'/></hugepages>"
                      "</memoryBacking><vcpu>", 1) if "memoryBacking" not in SB else SB


def _steps(host, pinned):
    def prep(name, uuid, xml):
        def run():
            assert call(xml, name, "prepare", "begin") == 0
            lv().start(name, uuid)
            tuned_for_every_lease(host, pinned)
        return run

    def reconnect(name, uuid, xml):
        def run():
            lv().start(name, uuid)
            assert call(xml, name, "reconnect", "begin") == 0
            tuned_for_every_lease(host, pinned)
        return run

    return {"Ra": lambda: release(host, "vm-a", SA), "Rb": lambda: release(host, "vm-b", SB),
            "Cb": reconnect("vm-b", UUID_B, SB), "Ca": reconnect("vm-a", UUID_A, SA)}


def _sweep(host, pinned, setup, argv, xml, after):
    before, trials = tree(host), 0
    steps = _steps(host, pinned)
    for order in after:
        n = 0
        while True:
            alive.GRACE_S = 120.0 if n % 2 == 0 else 0.0
            setup()
            code = killed_at(n, argv, xml, POINTS)
            for step in order:
                steps[step]()
            alive.GRACE_S = 0.0
            lv().stop("vm-a"), lv().stop("vm-b")
            call(SA, "vm-a", "release", "end"), call(SB, "vm-b", "release", "end")  # whatever is left
            assert tree(host) == before, f"{argv[:3]} killed at point {n}, then {order}"
            clean(host)
            trials += 1
            if code != KILLED:
                break
            n += 1
    return trials


def test_kill_in_a_second_domains_prepare(sweep_host):
    host, pinned = sweep_host

    def setup():
        assert call(SA, "vm-a", "prepare", "begin") == 0
        lv().start("vm-a", UUID_A)

    after = orders(("Rb", "Cb", "Ra"), [("Cb", "Rb")]) + [["Ra"]]
    assert _sweep(host, pinned, setup, ["vm-b", "prepare", "begin", "-"], SB, after)


def test_kill_in_a_release_that_is_not_the_last(sweep_host):
    host, pinned = sweep_host

    def setup():
        alive.GRACE_S = 120.0
        assert call(SA, "vm-a", "prepare", "begin") == 0
        lv().start("vm-a", UUID_A)
        assert call(SB, "vm-b", "prepare", "begin") == 0
        lv().start("vm-b", UUID_B)
        lv().stop("vm-a")

    after = orders(("Ra", "Rb", "Cb"), [("Cb", "Rb")]) + [["Cb", "Rb"]]
    assert _sweep(host, pinned, setup, ["vm-a", "release", "end", "-"], SA, after)
