"""``vmtune map``: a picture of the host, who holds which CPU, what is isolated, the pages per node.

    from vmtune.hostmap import build, text, svg
    hostmap = build.build(host, [(xml, state), ...], config=cfg)   # the model (build.py)
    text.render(hostmap, color=False)   # the terminal view: lines
    svg.render(hostmap)                 # the SVG: one standalone document (str)
    hostmap.to_dict()                   # the JSON (schemas/map.schema.json)

    build.py   the model: nodes, L3 domains, cores, CPUs with role, holder, pins and kind; domains;
               pages; the hook's view
    devices.py the domains' passthrough devices and the node each hangs off (locality.locate)
    names.py   domain names shortened for labels, the same way in every view
    text.py    the terminal view (80 columns up to 64 CPUs; colour on a TTY without NO_COLOR)
    svg.py     the SVG view (lxml; no script, no external reference)
    live.py    the live inputs: the pools' sizes from sysfs, the hook's leases and isolation
"""
