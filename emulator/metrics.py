"""The counters behind the CloudWatch-style metrics (EFS user guide, "Amazon CloudWatch
metrics for Amazon EFS"; docs/EMULATOR.md, Metrics)."""

from .ops import OpClass

CLASSES = tuple(OpClass)  # counters are indexed by position here
_OPS_NAMES = ("DataReadOps", "DataWriteOps", "MetadataReadOps", "MetadataWriteOps", "CommitOps")


class Counters:
    """Cumulative operations, bytes and metered bytes since the model started;
    `nbytes` holds data bytes for data operations, the metadata size for others."""

    __slots__ = ("metered", "nbytes", "ops")

    def __init__(self) -> None:
        self.ops = [0] * len(CLASSES)
        self.nbytes = [0.0] * len(CLASSES)
        self.metered = 0.0

    def snapshot(self) -> dict[str, float]:
        data_read, data_write, *metadata = self.nbytes
        out = {
            "MeteredIOBytes": self.metered,
            "TotalIOBytes": sum(self.nbytes),
            "DataReadIOBytes": data_read,
            "DataWriteIOBytes": data_write,
            "MetadataIOBytes": sum(metadata),
        }
        out.update(zip(_OPS_NAMES, map(float, self.ops)))
        return out
