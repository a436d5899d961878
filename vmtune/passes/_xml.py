"""Small helpers the passes share for building elements."""

from lxml import etree

from ..xml.edits import E, Put, clone, insert


def copy(el: etree._Element | None, tag: str, drop: tuple[str, ...] = (),
         into: etree._Element | None = None) -> etree._Element:
    """A detached copy of ``el`` (or a new ``tag``) without children named in ``drop`` (``into``: as ``E``'s)."""
    new = E(tag, dict(el.attrib) if el is not None else None, into=into)
    for child in el if el is not None else ():
        if not isinstance(child.tag, str) or child.tag not in drop:
            new.append(clone(child))
    return new


def firsts(node: etree._Element, tags: tuple[str, ...]) -> dict:
    """The first child of ``node`` of each of ``tags`` that it has (``xmltext.find`` of each), of one
    walk over its children."""
    out: dict = {}
    for child in node.iterchildren(*tags):
        out.setdefault(child.tag, child)
    return out


def comments(el: etree._Element | None) -> list[etree._Element]:
    """Copies of the comments and PIs among ``el``'s children: what an element rebuilt from
    scratch takes over from the one it replaces."""
    return [clone(child) for child in (el if el is not None else ()) if not isinstance(child.tag, str)]


def put_under(dom, parent_tag: str, child: etree._Element, reason: str) -> Put:
    """Put ``child`` into the domain's ``parent_tag`` element, creating that element if needed."""
    parent = dom.find(parent_tag)
    if parent is None:
        wrapper = E(parent_tag, into=dom.node)
        insert(wrapper, child)
        return Put(dom.node, wrapper, reason)
    return Put(parent, child, reason)
