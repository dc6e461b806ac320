"""fusetrace: a FUSE passthrough that traces every operation and can emulate EFS."""

__version__ = "0.1.0"
