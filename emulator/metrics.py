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


MINUTE = 60.0  # seconds: CloudWatch's period, over which it gives a metric's Minimum


def lowest_permitted(permitted: float, stretches: list[tuple[float, float | None, float]], now: float) -> float:
    """PermittedThroughput's Minimum over the minute to `now`, as CloudWatch gives it:
    `permitted` now, or the baseline if the credits were spent at any time in the
    minute (`stretches`: Model.credit_stretches).

    Taken from the credit pipe's own record of when its balance was at zero, not from
    samples: a sampler sees nothing between two samples and costs the server a task,
    while the pipe notes each stretch once, when the balance leaves zero (O(1)), and
    the last stretch alone answers here.  The burst rate is the one configured now."""
    if stretches:
        _, end, baseline = stretches[-1]
        if end is None or end > now - MINUTE:
            return min(permitted, baseline)
    return permitted
