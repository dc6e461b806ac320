"""From a trace to a rehearsal and back: export, replay, fit, compare, simulate."""
