"""vmtune over a live libvirt: the library behind ``vmtune tag|untag|apply|revert|plan``.

    connect.py    open a libvirt connection (libvirt-python), errors as VmtuneError
    hostview.py   the host of a URI, one rule for every command (``of``): this machine's sysfs for
                  its system daemon; else libvirt's: getCapabilities, getFreePages, node devices
    domains.py    the domains of a connection: persistent XML, live XML, state
    tagging.py    write or remove the vmtune tag through the metadata API, nothing else
    originals.py  the XML a domain had before its first apply (/var/lib/vmtune/originals/UUID.xml)
    planner.py    apply's order and ledger (pure)
    apply.py      apply and revert: plan, save originals, define, move running threads (--live)

Only connect.py imports libvirt, and only when a connection is opened: ``import vmtune.live``
works without libvirt-python.
"""
