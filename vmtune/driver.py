"""The driver: parse, place, run the passes in order, apply their edits, write the domain back
(every byte they did not change kept: vmtune/xml/textkeep.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field

from lxml import etree

from .placement import claims as claims_mod
from . import config as config_mod
from .xml import edits as edits_mod
from . import profiles
from .placement import managers
from .xml import guestos, markup, textkeep, validate, xmlsafe, xmltext
from .record import retune, undo
from .placement import intent as intent_mod
from .placement import request as request_mod
from .context import PassContext
from .xml.edits import Change, Warn
from .errors import InvalidInput, Unsupported
from .xml.guestos import GuestOS
from .host import Host
from .xml.model import Domain
from .passes import ORDER
from .xml.style import serialize

VIRT_TYPES = ("kvm", "qemu")
# For a host known only from sysfs (no libvirt <guest> entries): host arch -> the domain arches
# its KVM runs natively. A host from capabilities says it itself (Host.guest_arches).
ARCH_ALIASES = {"x86_64": {"x86_64", "i686"}, "aarch64": {"aarch64"}, "ppc64le": {"ppc64le", "ppc64"},
                "ppc64": {"ppc64", "ppc64le"}, "s390x": {"s390x"}, "i686": {"i686"}}


def native_arches(host: Host) -> frozenset[str]:
    """The domain arches this host runs natively: its own, and those its capabilities list for kvm."""
    if host.guest_arches:
        return frozenset(host.guest_arches) | {host.arch}
    return frozenset(ARCH_ALIASES.get(host.arch, {host.arch}))


@dataclass(frozen=True)
class Result:
    xml: str
    profile: str
    changes: tuple[Change, ...] = ()
    placement: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # what the hand changed since vmtune's last rewrite, and stays (vmtune/record/undo.py)
    guest_os: GuestOS | None = None  # the guest OS as vmtune read it, with its evidence (vmtune/xml/guestos.py)

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "changes": [c.to_dict() for c in self.changes],
            "placement": self.placement,
            "warnings": list(self.warnings),
            "kept": list(self.kept),
            "guest_os": self.guest_os.to_dict() if self.guest_os else None,
            "xml": self.xml,
        }


@dataclass(frozen=True)
class Untuned:
    """A domain as it was before vmtune (``untune``)."""

    xml: str
    changed: bool  # False: vmtune never tuned it (no record), and ``xml`` is the input as given
    kept: tuple[str, ...] = ()  # what the hand changed since, and stays

    def to_dict(self) -> dict:
        return {"changed": self.changed, "kept": list(self.kept), "xml": self.xml}


def check_domain(dom: Domain, host: Host, tops: xmltext.Children | None = None) -> str:
    """The domain's type, once it is a ``<domain>`` vmtune tunes on ``host`` whose values libvirt
    takes (InvalidInput, Unsupported); ``tops``: its children, found already (validate.check)."""
    if dom.node.tag != "domain":
        raise InvalidInput(f"expected a libvirt <domain>, got <{dom.node.tag}>")
    virt = dom.type
    if virt not in VIRT_TYPES:
        raise Unsupported(f"domain type {virt!r} is not tuned by vmtune (only kvm and qemu)")
    arch = dom.arch
    if arch and arch not in native_arches(host):
        raise Unsupported(f"domain arch {arch} does not run natively on this {host.arch} host "
                          f"(it runs {', '.join(sorted(native_arches(host)))})")
    validate.check(dom, tops)  # what libvirt refuses, vmtune refuses (one line; vmtune's own bounds too)
    return virt


@dataclass(frozen=True)
class Tuned:
    """A domain placed and tuned: its tree, what placed it, and what the passes did."""

    root: etree._Element
    ctx: PassContext
    changes: tuple[Change, ...]
    warnings: tuple[str, ...]
    kept: tuple[str, ...] = ()
    source: markup.Source | None = None  # the text the passes started from (``record``)

    def text(self) -> str:
        """The tuned domain: its source text with what the passes changed written in, else whole."""
        if self.source is None:
            return serialize(self.root)
        return textkeep.write(self.source, self.root)


# An older vmtune's rewrite (no record) shows in these: it cannot be told from the user's own
OLD_TUNING = ("cputune/vcpupin", "devices/memballoon[@model='none']", "cpu[@mode='host-passthrough']",
              "cpu[@mode='maximum']")
OLD_WARNING = ("tuned by an older vmtune, which kept no record: the previous tuning cannot be told apart "
               "from the domain's own settings, and is tuned again as it stands")


def prepare(
    xml: str | bytes,
    host: Host,
    profile: str | None = None,
    claims: Iterable[str | bytes] = (),
    *,
    ledger: claims_mod.Ledger | None = None,
    force_virtio: bool = False,
    config: config_mod.Config | None = None,
) -> tuple[etree._Element, PassContext]:
    """Parse and check the domain, load the profile, add up the claims (or take ``ledger``: what
    the others hold, known another way) and place the domain."""
    root, ctx, *_ = _prepare(xml, host, profile, claims, ledger=ledger, force_virtio=force_virtio, config=config)
    return root, ctx


def _prepare(
    xml: str | bytes,
    host: Host,
    profile: str | None = None,
    claims: Iterable[str | bytes] = (),
    *,
    ledger: claims_mod.Ledger | None = None,
    force_virtio: bool = False,
    config: config_mod.Config | None = None,
    start_over: bool = False,
) -> tuple[etree._Element, PassContext, tuple[str, ...], tuple[str, ...], etree._Element | None,
           markup.Source | None]:
    """``prepare``; with ``start_over``, first put back what vmtune's last rewrite changed (its
    record, vmtune/record/undo.py), and also return what the hand changed since and stays, the warnings
    of that step, the domain as given when it had a record (else None), and the text and tree the
    passes start from (the domain as it was before vmtune, written as ``untune`` writes it)."""
    config = config or config_mod.Config()
    root = xmlsafe.parse(xml, "domain XML")
    dom = Domain(root)
    # one walk over <domain>'s children for the value checks and the guest OS reading
    tops = xmltext.Children(root, validate.READ + guestos.READ)
    virt = check_domain(dom, host, tops)
    name = profile or dom.tagged_profile or profiles.DEFAULT
    kept: tuple[str, ...] = ()
    warned: list[str] = []
    given = source = None
    if start_over:
        text = markup.text_of(xml)
        recorded = undo.recorded(root)
        if recorded and text is None:
            given = copy.deepcopy(root)
            kept = tuple(undo.take_back(root)[1])
        elif recorded:
            given = copy.deepcopy(root)
            back = _untuned(root, text)
            root = xmlsafe.parse(back.xml, "domain XML")
            text, dom, kept = back.xml, Domain(root), back.kept
        elif dom.tag is not None and any(xmltext.find(root, p) is not None for p in OLD_TUNING):
            warned.append(OLD_WARNING)
        if text is not None:
            source = markup.Source(text, root)  # told of each node before it changes
        if given is not None:  # the record taken back: the children are the tree's as it is now
            tops = xmltext.Children(root, guestos.READ)
    managed = managers.warning(dom)
    if managed:
        warned.append(managed)
    prof = profiles.load(name, config.profiles_dir)
    if config.efficiency_cpus and not host.hybrid:
        host = host.with_efficiency(config.efficiency_cpus)
    if ledger is None:
        ledger = claims_mod.ledger(claims, host, skip_uuid=dom.uuid, skip_name=dom.name)
        warned += ledger.itself
    reserved = host.reserved(config)
    wants = intent_mod.read(Domain(root), host, hand=start_over)
    placement = request_mod.place(prof, host, ledger, reserved, dom, config, wants)
    guest, hidden = guestos.reading(Domain(root), tops)  # as the user gave it, before any pass
    return (root, PassContext(host, prof, placement, ledger, reserved, virt, force_virtio, wants, config, guest,
                              hidden),
            tuple(kept), tuple(warned), given, source)


def run_passes(root: etree._Element, ctx: PassContext, passes=ORDER, watch=None) -> tuple[list[Change], list[str]]:
    """Run ``passes`` in order, each on the tree the previous ones left; apply every edit (``watch``:
    a markup.Source told of each node before it changes). Each change names its element by its
    XPath in the tree as they all left it."""
    done: list[edits_mod.Applied] = []
    warnings: list[str] = list(ctx.placement.warnings)
    for tuning_pass in passes:
        for edit in tuning_pass.run(ctx, Domain(root)):
            if isinstance(edit, Warn):
                warnings.append(edit.message)
                continue
            applied = edits_mod.applied(edit, watch, done)
            if applied is not None:
                done.append(applied)
    return edits_mod.settle(done, root), warnings  # each path as it is in the output


def tune(
    xml: str | bytes,
    host: Host,
    profile: str | None = None,
    claims: Iterable[str | bytes] = (),
    *,
    ledger: claims_mod.Ledger | None = None,
    passes=ORDER,
    force_virtio: bool = False,
    config: config_mod.Config | None = None,
    record: bool = False,
) -> Tuned:
    """Place domain ``xml`` on ``host`` and run ``passes`` (default: all, in order) on it: the one
    entry of ``rewrite`` (and so of the planner) and of the hook's migrate/restore re-pin (the
    placement passes, with a ledger from its leases). ``record``: start from the domain as it was
    before vmtune (its record), and record this tuning in it (``rewrite``'s way; the re-pin changes
    only pins, byte for byte). Raises as ``rewrite`` does."""
    root, ctx, kept, warned, given, source = _prepare(xml, host, profile, claims, ledger=ledger,
                                                      force_virtio=force_virtio, config=config, start_over=record)
    base = undo.snapshot(root, source) if record else None
    changes, warnings = run_passes(root, ctx, passes, source)
    if base is not None:
        if given is not None:  # tuned before: the changes from the input as given
            retune.keep_assigned(given, root, source)
            changes = retune.against(given, root, changes)
            kept = retune.truthful(kept, root, changes)
        undo.write(root, undo.diff(base, root), source)
    return Tuned(root, ctx, tuple(changes), tuple(warned) + tuple(warnings), kept, source)


def rewrite(
    xml: str | bytes,
    host: Host,
    profile: str | None = None,
    claims: Iterable[str | bytes] = (),
    *,
    force_virtio: bool = False,
    config: config_mod.Config | None = None,
) -> Result:
    """Tune domain ``xml`` for ``host`` with ``profile`` (else the domain's tag, else balanced).

    ``claims`` are the XMLs of the other domains on the host. Raises InvalidInput or Unsupported
    for input vmtune cannot tune and DoesNotFit when the domain cannot be placed.
    """
    done = tune(xml, host, profile, claims, force_virtio=force_virtio, config=config, record=True)
    return Result(done.text(), done.ctx.profile.name, done.changes, done.ctx.placement.to_dict(),
                  done.warnings, done.kept, done.ctx.guest)


def untune(xml: str | bytes) -> Untuned:
    """Domain ``xml`` as it was before vmtune's rewrites, with what the hand changed since kept
    (vmtune/record/undo.py), every other byte as given. A domain vmtune never tuned (no record) comes back
    as it was given."""
    root = xmlsafe.parse(xml, "domain XML")
    if root.tag != "domain":
        raise InvalidInput(f"expected a libvirt <domain>, got <{root.tag}>")
    text = markup.text_of(xml)
    if not undo.recorded(root):
        return Untuned(text if text is not None else xml.decode("utf-8", "replace"), False)
    return _untuned(root, text)


def _untuned(root: etree._Element, text: str | None) -> Untuned:
    """``root`` (parsed from ``text``) put back as it was before vmtune, written into ``text``."""
    source = None if text is None else markup.Source(text, root)
    if source is not None:
        undo.hold(source, root)
    restored: dict = {}
    had, kept = undo.take_back(root, restored)
    xml = serialize(root) if source is None else textkeep.write(source, root, restored, trailing=True)
    return Untuned(xml, had, tuple(kept))
