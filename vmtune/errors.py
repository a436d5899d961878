"""The exceptions vmtune raises.

    VmtuneError                 every error vmtune raises on purpose
    ├── InvalidInput            the XML, a profile or the config is malformed or unsupported (exit 1)
    │   └── Unsupported         valid XML that vmtune refuses: foreign arch, a non-kvm/qemu domain
    ├── DoesNotFit              the domain cannot be placed on this host (exit 3)
    └── Unavailable             libvirt-python (or, for doctor --prometheus, prometheus_client) is not
                                installed, or libvirt cannot be reached (exit 4)
"""


class VmtuneError(Exception):
    """Base class of every error vmtune raises on purpose."""

    exit_code = 1


class InvalidInput(VmtuneError):
    """Input that vmtune cannot read: malformed XML, an unknown profile, a bad config."""


class Unsupported(InvalidInput):
    """Well-formed input that vmtune will not tune (another arch, a Xen or LXC domain)."""


class UsageError(VmtuneError):
    """A command line that does not make sense (an option another one makes meaningless): exit 2,
    as argparse's own usage errors."""

    exit_code = 2


class DoesNotFit(VmtuneError):
    """The domain does not fit on the host with the CPUs, memory and hugepages left."""

    exit_code = 3


class Unavailable(VmtuneError):
    """libvirt-python is missing, or the libvirt URI cannot be reached (or the connection dropped)."""

    exit_code = 4
