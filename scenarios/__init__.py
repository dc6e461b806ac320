"""Scenarios: published experiments run against the emulator, with their results and
report, and the harness that runs them (scratch mounts, fio, children, progress, the
demo); installed as fusetrace.scenarios."""
