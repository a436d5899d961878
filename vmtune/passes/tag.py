"""The vmtune tag in <metadata>: the profile this domain was tuned with (the hook reads it)."""

from lxml import etree

from ..xml.edits import Put
from ..xml.model import NSMAP, TAG, Tag


def run(ctx, dom):
    reason = f"tag the domain with the profile it was tuned for ({ctx.profile.name}); the hook reads it"
    tag = dom.tag
    if tag is not None:
        return [Tag.profile.edit(Tag(tag), ctx.profile.name, reason)]
    new = etree.Element(TAG, nsmap=NSMAP)
    new.set("profile", ctx.profile.name)
    metadata = dom.metadata
    if metadata is None:
        metadata = etree.Element("metadata")
        metadata.append(new)
        return [Put(dom.node, metadata, reason)]
    return [Put(metadata, new, reason)]
