"""Per-operation latency: a lognormal distribution fixed by its median and 99th percentile."""

import math
import random

_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Lognormal:
    """Samples in seconds from a lognormal with the given median and p99 (ms)."""

    __slots__ = ("mean", "median", "sigma")

    def __init__(self, median_ms: float, p99_ms: float):
        self.median = median_ms / 1000
        self.sigma = math.log(p99_ms / median_ms) / _Z99 if median_ms > 0 else 0.0
        self.mean = self.median * math.exp(self.sigma**2 / 2)

    def sample(self, rng: random.Random) -> float:
        if self.sigma == 0.0:
            return self.median
        return self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
