"""The record vmtune keeps inside a tuned domain, and untune: what a rewrite changed
(undo.py, unitdiff.py), a unit the hand changed since (handmerge.py) and a re-tuning's
changes (retune.py)."""
