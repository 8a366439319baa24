"""Herald's pure rules: no I/O, no clock, no Temporal, no SQL.

Everything that decides lives here; workflows and activities call it.
"""
