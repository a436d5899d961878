"""lxml's text of an element laid out as ``xmltext.indent`` and libvirt lay it out, from the text
alone: each child on a line of its own, one ``step`` deeper than its parent, a value on its
element's line (``<vcpu placement='static'>4</vcpu>``).

vmtune/xml/textkeep.py writes a unit vmtune changed this way when the unit, as it was given, is laid
out so too (what ``virsh dumpxml`` and virt-manager write): then every line the change did not
touch comes out as it was. Comments, PIs and text beside child elements are not laid out here
(None): the writer takes such a unit apart instead.
"""

from __future__ import annotations

import functools


def layout(xml: str, indent: str | None, step: str, newline: str = "\n") -> str | None:
    """``xml`` (lxml's text of one element, with no whitespace between tags, as the parser leaves
    it) laid out at ``indent`` (its first line's; None: all on one line, as it is); None where it
    holds a comment, a PI or text beside child elements."""
    if indent is None or "><" not in xml:
        return xml
    if "<!--" in xml or "<?" in xml:
        return None
    pre = _breaks(newline, indent, step)
    out: list[str] = []
    depth = 0
    # a line each: a tag, or an element and its value, without its first '<' and last '>' (they
    # come with the line break before each line but the first)
    for line in xml[1:-1].split("><"):
        if "<" not in line:  # a tag
            if line[0] == "/":  # an end tag
                depth -= 1
                out.append(pre[depth])
            else:
                out.append(pre[depth])
                if line[-1] != "/":  # a start tag: the next line is deeper
                    depth += 1
                    if depth == len(pre):  # deeper than the shared list goes: a copy, one more
                        pre = pre + (">" + newline + indent + step * depth + "<",)
        elif line.count("<") != 1 or "</" not in "<" + line:
            return None  # text beside elements
        else:
            out.append(pre[depth])
        out.append(line)
    out[0] = "<"  # (the first line has no break before it)
    out.append(">")
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _breaks(newline: str, indent: str, step: str) -> tuple[str, ...]:
    """The line break and indentation between two lines, the line before's last '>' and the
    next's first '<' around them, at each depth (``layout`` goes deeper on a copy): made once for
    a document's style and indent, not for each element laid out."""
    return tuple(">" + newline + indent + step * depth + "<" for depth in range(8))


def single(xml: str) -> str | None:
    """lxml's double-quoted attribute values in single quotes, as libvirt writes them; None where
    that takes more than turning the quotes (a quote in a value or a text, a comment, a PI)."""
    if "'" in xml or "<!--" in xml or "<?" in xml or xml.count('"') != 2 * xml.count('="'):
        return None
    return xml.replace('"', "'")
