"""The trace: one record per FUSE operation, written as Parquet files."""
