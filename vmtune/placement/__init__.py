"""Who gets which CPUs and pages: the placement (search.py) and its parts: the claims of
the other domains, the core pick, the notes, memory fit, housekeeping threads, device
locality, the user's intent, the managers, each rule about one domain once (holdings.py)
and the audit of a whole host."""
