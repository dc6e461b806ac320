"""Scenarios: published experiments run against the emulator, with their results and report."""
