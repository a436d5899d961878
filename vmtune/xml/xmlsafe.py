"""Parsing untrusted XML: no entity expansion, no DTD or network loads, bounded size; and reading it
(``read``: a file or stdin, at most ``MAX_BYTES``, UTF-8).

``read`` returns the text as a ``Named`` string, which is a ``str`` that also knows the file it came
from. Wherever that text goes in the library (a domain, a claim, capabilities), ``parse``'s errors
then name the file (``domain XML dom.xml is not well-formed: ..., line 3, column 7``) and not
lxml's ``<string>``. A plain string gives the same message without a file name.
"""

from __future__ import annotations

import re
import sys
import threading

from lxml import etree

from ..errors import InvalidInput

MAX_BYTES = 8 * 1024 * 1024  # a domain with every device libvirt knows is well under 1 MiB
# the one DOCTYPE accepted: a bare <!DOCTYPE name>, no internal subset, no SYSTEM or PUBLIC id
BARE_DOCTYPE = re.compile(rb"<!DOCTYPE\s+[^\s\[\]<>'\"]+\s*>")


STDIN = "<stdin>"  # how stdin (``-``) is named in messages


class Named(str):
    """The text of a file, with its name (``name``): what ``read`` returns."""

    name: str

    def __new__(cls, text: str, name: str) -> Named:
        named = super().__new__(cls, text)
        named.name = name
        return named


def source(xml: str | bytes) -> str | None:
    """The file that ``xml`` was read from (``read``), else None."""
    return xml.name if isinstance(xml, Named) else None


def read(path: str, what: str) -> Named:
    """The text of the XML file ``path`` (``-``: stdin), named for ``parse``'s errors: InvalidInput
    (one line) when it cannot be read, is larger than ``MAX_BYTES`` (never more is read) or is not
    UTF-8."""
    name = STDIN if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {what} {name}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise InvalidInput(f"{what} {name} is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return Named(data.decode("utf-8"), name)
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} {name} is not UTF-8") from None


_local = threading.local()  # one parser a thread: lxml locks a parser's context, one parse at a time


def _parser() -> etree.XMLParser:
    """This thread's parser, made once: each parse starts afresh (its error log too), and a parser
    made for each call costs more than the parse of a small domain's tags."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = _new_parser()
    return parser


def _new_parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_blank_text=True,
        remove_comments=False,
    )


def _label(xml: str | bytes, what: str) -> str:
    """``what`` with the file ``xml`` came from, unless ``what`` names it already."""
    name = source(xml)
    return what if name is None or what == name or what.endswith(f" {name}") else f"{what} {name}"


def parse(xml: str | bytes, what: str = "XML") -> etree._Element:
    """Parse ``xml`` safely and return its root element, or raise InvalidInput in one line that
    names ``what`` (and the file, for a text of ``read``) and lxml's line and column."""
    what = _label(xml, what)
    data = xml.encode("utf-8") if isinstance(xml, str) else xml
    if len(data) > MAX_BYTES:
        raise InvalidInput(f"{what} is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    # every declaration starts "<!": a text without "!" (most domains; one memchr, where a search for
    # "<!ENTITY" stops at each "<") has none to look at
    if b"!" in data and (b"<!ENTITY" in data or (b"<!DOCTYPE" in data
                                                 and data.count(b"<!DOCTYPE") != len(BARE_DOCTYPE.findall(data)))):
        raise InvalidInput(f"{what} has a DOCTYPE with declarations or an external id, or an entity "
                           "declaration, which vmtune does not accept")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        # exc.msg ends with the line and column; str(exc) adds "(<string>, line N)", lxml's name for a string
        msg = next(iter((exc.msg or "").splitlines()), "") or "malformed XML"
        raise InvalidInput(f"{what} is not well-formed: {msg}") from None
    if root is None:
        raise InvalidInput(f"{what} is empty")
    if not _bare(root.getroottree().docinfo):  # what the bytes hid (UTF-16, say): the parser's word
        raise InvalidInput(f"{what} has a DOCTYPE with declarations or an external id, which vmtune does not accept")
    return root


def _bare(info) -> bool:
    """No DOCTYPE, or one that only names the root: nothing to expand, nothing to fetch."""
    dtd = info.internalDTD
    declared = dtd is not None and (any(True for _ in dtd.iterentities()) or bool(dtd.elements()))
    return not (declared or info.system_url or info.public_id or info.externalDTD is not None)

