"""A changed domain written back into the text it was parsed from: every byte vmtune did not
change stays as it was (quotes, attribute order, comments, whitespace, character references).

``write(source, after)`` walks ``after`` (the tree the passes changed) beside the markup of
``source``'s text (vmtune/xml/markup.py). A node nothing touched (``Source.touch``; ``untune``
compares the nodes it froze with their copies) is copied from the text. A unit vmtune changed,
given as libvirt lays it out, is written whole, laid out the same way (``Style.laid``). Any other
element of the same tag keeps its start tag (vmtune/xml/starttag.py: the attributes it still has,
with their quotes, in place; a changed one in its own quotes; a new one in the document's), its
end tag, the whitespace before each child that stays, and its children paired with the old ones
(the same node, else the same key, ``xmlkeys.ident_of``). A new node is written in the
document's style (vmtune/xml/style.py), laid out as its siblings are, after what ends the line
before the next child as given. ``raw`` gives the text of nodes put back from vmtune's record
(``untune``), written as they were given. Where the markup does not line up with the tree, the
document is written whole by lxml (``serialize``), as before.
"""

from __future__ import annotations

from lxml import etree

from . import starttag, xmltext
from .markup import Mismatch, Source, Tok, Unplaced
from .style import Style, blank, last_line, serialize, trail
from .elements import SPECIAL
from .xmlkeys import ident_of

__all__ = ["serialize", "write"]


def write(source: Source, after: etree._Element, raw: dict | None = None, trailing: bool = False) -> str:
    """``after`` written into ``source``'s text, every byte of what did not change kept; ``raw``:
    node -> its text, for nodes to be written as given (with the whitespace before it, where that
    is kept too). New elements of ``after`` are laid out in place. A child that goes takes the
    whitespace before it along (vmtune's record keeps it), with ``trailing`` (``untune``, which takes
    away what vmtune added) but for what ends the line before."""
    text = source.text
    for _ in range(2):
        try:
            tok = source.markup()
            if after.tag != source.tree.tag:
                raise Mismatch(after.tag)
            body = _Writer(source, raw or {}, tok, trailing).changed(after, source.tree, tok)  # the root: never alike
            return f"{text[:tok.start]}{body}{text[tok.end:]}"  # (one copy of the text, not two)
        except Unplaced:
            source.rescan()
        except (Mismatch, IndexError):
            break
    return serialize(after)


def _same(a, b) -> bool:
    return etree.tostring(a, with_tail=False) == etree.tostring(b, with_tail=False)


def _ident(node) -> tuple:
    tag = node.tag
    if not isinstance(tag, str):
        return ("#", node.text)
    return ident_of(node) if xmltext.local_name(tag) in SPECIAL else (tag,)


class _Writer:
    def __init__(self, source: Source, raw: dict, root: Tok, trailing: bool):
        self.source, self.text, self.raw, self.trailing = source, source.text, raw, trailing
        self.style = Style(source.text, root)

    def before(self, old) -> tuple:
        """Node ``old`` (of the tree as parsed) as it was given: its attributes (None: as its start
        tag says), children and text, and a node that was so (its copy, else itself)."""
        src = self.source
        was = src.copies.get(old)
        if was is not None:
            return list(was.attrib.items()), list(was), was.text, was
        kids = src.kids.get(old)
        return None, list(old) if kids is None else kids, src.texts.get(old, old.text), old

    def pair(self, new, old, toks, i: int) -> str:
        """``new`` in the place of ``old`` (a node of the tree as parsed, child ``i`` of ``toks``)."""
        if new in self.raw:
            return self.raw[new]
        src = self.source
        start, end = toks.start(i), toks.end(i)
        canon = src.canon.get(new)  # the record's markup.Changed
        if old not in src.dirty and (canon is None or canon.node is not old):  # as parsed, or compared with its copy
            was = src.copies.get(old, old)  # (the record found ``new`` other than ``old``: not alike)
            if new is was or _same(new, was):
                return self.text[start:end]
        if canon is not None:  # a unit: written whole where it was given laid out as lxml would
            laid = self.style.laid(canon.was, canon.now, start, end)
            if laid is not None:
                return laid
        tok = toks[i]
        if not isinstance(new.tag, str) or new.tag != old.tag or tok.kids is None:
            return self.fresh(new, self.style.indent(start))
        try:
            return self.changed(new, old, tok)
        except Mismatch:
            return self.fresh(new, self.style.indent(start))

    def changed(self, new, old, tok: Tok) -> str:
        """Element ``new`` in the place of ``old``, of the same tag: its start tag, content and
        end tag, each as given where it did not change."""
        text, src = self.text, self.source
        attrs, olds, value, was = self.before(old)
        same = new is old and old not in src.texts and was is old  # untouched: only something below it changed
        tag = text[tok.start:tok.head]
        local = xmltext.local_name(was.tag)
        name = local if tag.startswith(local, 1) and tag[len(local) + 1] in " \t\r\n/>" else starttag.name_of(tag)
        if name.rpartition(":")[2] != local:
            raise Mismatch(name)
        head = tag[:len(tag) - (1 if tok.close is not None else 2)]
        if not same:
            items = list(new.attrib.items())
            if items != attrs:
                head = starttag.changed(head, name, attrs, items, was, new, starttag.quote_of(new, self.style.quote))
        end = text[tok.close:tok.end] if tok.close is not None else f"</{name}>"
        kids = list(new)
        # element-only (layout beside): the text beside untouched children is as given, and copied
        if kids and blank(new.text) and (same or old not in src.texts or all(blank(k.tail) for k in kids)):
            return f"{head}>{self.children(kids, olds, tok)}{end}"  # (one copy of the children)
        if not kids:
            if new.text is None:  # written empty, as it reads back (``<x></x>`` stays so)
                return head + (">" + end if tok.close == tok.head else "/>")
            kept = tok.close is not None and not olds and value == new.text
            value = text[tok.head:tok.close] if kept else starttag.escape(new.text)
            if not kept and self.style.newline == "\r\n":
                value = value.replace("\n", "\r\n")  # the parser read the document's line ends as "\n"
            return head + ">" + value + end
        inner = "".join(self.fresh(k, None) + starttag.escape(k.tail or "") for k in kids)
        return head + ">" + starttag.escape(new.text or "") + inner + end

    def children(self, kids: list, olds: list, tok: Tok) -> str:
        """An element's children ``kids`` (given as ``olds``) and the whitespace around them. A
        run of children as given is copied whole, the whitespace before each with it. A new child
        comes after what ends the line before the next child as given (trailing spaces, a blank
        line), on a line of its own, so that taking it away gives every byte back."""
        text, src = self.text, self.source
        toks = src.kids_of(tok, olds)
        n = len(toks)
        if len(olds) != n:
            raise Mismatch(tok.start)
        pairs = self.paired(olds, kids)
        dirty = src.dirty if not (src.copies or self.raw) else src.dirty | set(src.copies) | set(self.raw)
        closing = text[toks.end(n - 1):tok.close] if n and tok.close is not None else None
        if closing is not None and not blank(closing):
            raise Mismatch(tok.start)  # text after the last child: not element-only
        if closing is None:  # no child before: laid out anew
            indent = self.style.indent(tok.start)
            closing = "" if indent is None else self.style.newline + indent
        gaps: dict = {n: closing}

        def before(k: int) -> str:  # the whitespace before child k as given (n: before the end tag)
            gap = gaps.get(k)
            if gap is None:
                gap = gaps[k] = text[toks.end(k - 1):toks.start(k)]
            return gap

        near = next((i for i in pairs if i is not None), 0 if n else None)
        out, run, last, cut = [], None, -1, {}  # a run from offset ``run`` to the end of olds[last]
        for j, (kid, i) in enumerate(zip(kids, pairs)):
            if i is not None and i == last + 1 and kid is olds[i] and kid not in dirty:
                if run is None:
                    run = toks.end(i - 1) + cut.get(i, 0)
                last = near = i
                continue
            if run is not None:
                out.append(text[run:toks.end(last)])
                run = None
            if i is None:  # new: after what ends the line before the next child as given
                b = next((k for k in pairs[j + 1:] if k is not None), n)
                if b > last + 1:
                    self.dropped(out, before, last + 1, b)
                    last = b - 1
                if kid in self.raw and self.raw[kid][:1].isspace():  # as given, whitespace before it too
                    out.append(self.raw[kid])
                    continue
                if b not in cut:
                    out.append(trail(before(b)))
                    cut[b] = len(out[-1])
                ws = before(near) if near is not None else ""
                ws = last_line(ws) if near is not None and blank(ws) else self.style.deeper(tok)
                nl = ws.rfind("\n")
                out.append(ws + self.fresh(kid, None if nl < 0 else ws[nl + 1:]))
                continue
            if i > last + 1:
                self.dropped(out, before, last + 1, i)
            near, last = i, max(last, i)
            ws = before(i)[cut.get(i, 0):]
            out.append((ws if blank(ws) else self.style.deeper(tok)) + self.pair(kid, olds[i], toks, i))
        if run is not None:
            out.append(text[run:toks.end(last)])
        if last + 1 < n:
            self.dropped(out, before, last + 1, n)
        out.append(closing[cut.get(n, 0):])
        return "".join(out)

    def dropped(self, out: list, before, first: int, stop: int) -> None:
        """Children ``first`` to ``stop`` are gone, and the whitespace before each (``trailing``:
        but for what ends the line before: trailing spaces, blank lines)."""
        if self.trailing:
            out.extend(trail(before(k)) for k in range(first, stop))

    def paired(self, olds: list, news: list) -> list:
        """For each new child, the index of the old one it stands for: the same node, else one of
        the same key (``xmlkeys.ident_of``) that is gone (an element put in the place of another,
        or a copy); None: new."""
        pairs = list(map(dict(zip(olds, range(len(olds)))).get, news))
        if None in pairs:
            gone = set(range(len(olds))).difference(pairs)
            if not gone:  # nothing to stand for: each None is new
                return pairs
            free: dict = {}
            for i in sorted(gone):
                old = olds[i]
                free.setdefault(_ident(self.source.copies.get(old, old)), []).append(i)
            for j, new in enumerate(news):
                if pairs[j] is None and free.get(_ident(new)):
                    pairs[j] = free[_ident(new)].pop(0)
        return pairs

    def fresh(self, node, indent: str | None) -> str:
        """A node vmtune wrote (or put back as it was given: ``raw``)."""
        return self.raw[node] if node in self.raw else self.style.fresh(node, indent, self.source.wrote.get(node))
