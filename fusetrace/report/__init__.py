"""`fusetrace report DIR`: who did what on a trace and how long it took, per operation,
process or directory; how much of the records' span the operations account for; what to
change (hints); operations and bytes over time (`--timeline`, `--plot`); and for an
emulated trace where the modelled time went, the profile, and whether the host kept up.
Several trace directories (a fleet's: `fusetrace report 'traces/*'`) give one report.

filters.py says which records a report is about (Filters), query.py asks DuckDB (Trace),
hints.py holds the hint rules, render.py writes the text, plots.py draws the timeline,
command.py is the command.
"""
