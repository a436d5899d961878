"""The host-state engine: what vmtune changes on the host while latency domains run, and puts back.

One model, the way tuned's plugins are one model, with stricter restore rules:

    kinds/       every knob kind, declared once and registered in one table (``KINDS``): how its
                 items are keyed, found, read, parsed, formatted, written and validated
    record.py    the one record type (before, after, journal mark) and the rules that judge it:
                 a value changed by hand is left alone; a restore the kernel refuses is kept
    engine.py    the engine: journal, write, read back, settle, restore, verify
    document.py  the state file's shape, and its reader, built from the kinds
    statedir.py  the state folder: the lock, atomic commits, damage set aside
    tuning.py    governors, EPP, C-states, KSM: the knobs a latency host wants
    pages.py     hugepage pools: a lease's needs, the top-up and the give-back (counted)
    isolation/   the host's tasks, IRQs, masks and cgroups kept off the leases' CPUs
    alive.py     whether a leased domain still runs (its QEMU, libvirt's status files)
    leases.py    the lifecycle: a lease taken, released, reaped

The hook (vmtune/hook/) and the CLI's ``vmtune hook reap`` are adapters over ``leases.Leases``; the
doctor reads the same state through ``statedir`` and ``document``. Nothing here reads the
environment: the callers pass a ``vmtune.roots.Roots``.

This package imports nothing at import time, so that a hook call loads only what it uses.
"""
