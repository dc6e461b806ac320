"""Faults on demand: rules that make chosen operations fail, stall or come up short."""
