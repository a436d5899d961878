"""The XML model and writing it back: libvirt's domain XML declared once (model.py), the edits
and their text (edits.py, xmltext.py, splice.py, textkeep.py and the modules it writes
with), safe parsing (xmlsafe.py), libvirt's value checks (validate.py), the guest OS
(guestos.py), the record's keys (xmlkeys.py) and memory units (units.py)."""
