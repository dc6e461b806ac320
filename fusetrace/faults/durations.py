"""Durations in fault rules: read ("250ms", "40s", "2m"), said back, and a delay rule's
delay, fixed or drawn from a distribution (docs/FAULTS.md, "What it does").

A drawn delay is a quantile of its distribution at a point `u` in (0, 1) that the
injector hashes from (seed, rule, operation, path, match count), as it decides a
probability: the same workload is delayed the same way however other files' operations
interleave with it, and no random state is kept."""

import math
from dataclasses import dataclass
from statistics import NormalDist

from ..emulator.events import LONGEST, seconds
from ..errors import BadValue

_NORMAL = NormalDist()  # the standard normal
_Z99 = _NORMAL.inv_cdf(0.99)  # its 99th percentile, about 2.326
_FORMS = (
    "a duration (50ms), uniform:LOW,HIGH (uniform:10ms,200ms) or lognormal:p50=A,p99=B (lognormal:p50=5ms,p99=200ms)"
)


def parse_duration(value: object, where: str, key: str) -> float:
    """Seconds from a number or text such as "250ms", "40s", "2m" (as events take them)."""
    try:
        return seconds(value)
    except ValueError as exc:
        raise BadValue(f"{where}: {key} {exc}") from None


def say_s(s: float) -> str:
    """Seconds as a rule's table says them: 250ms, 40s (read back by parse_duration)."""
    return f"{s * 1000:g}ms" if s < 1 else f"{s:g}s"


@dataclass(frozen=True)
class Delay:
    """A delay rule's delay, in seconds: `fixed` (a), `uniform` between a and b, or
    `lognormal` with median a and 99th percentile b."""

    form: str
    a: float
    b: float = 0.0

    @property
    def drawn(self) -> bool:
        """Whether each firing draws its own delay (and so the rule needs a seed)."""
        return self.form != "fixed"

    def at(self, u: float) -> float:
        """The delay at quantile u (0 < u < 1): the distribution's inverse CDF, capped at
        a year (a lognormal's far tail: p50 5ms, p99 200ms reaches 38 min at the injector's
        largest u, 1 - 2^-53)."""
        if self.form == "fixed":
            return self.a
        if self.form == "uniform":
            return self.a + (self.b - self.a) * u
        sigma = math.log(self.b / self.a) / _Z99
        return min(self.a * math.exp(sigma * _NORMAL.inv_cdf(u)), LONGEST)

    def describe(self) -> str:
        """As a faults file writes it (normalised), read back by parse_delay."""
        if self.form == "fixed":
            return say_s(self.a)
        if self.form == "uniform":
            return f"uniform:{say_s(self.a)},{say_s(self.b)}"
        return f"lognormal:p50={say_s(self.a)},p99={say_s(self.b)}"


def parse_delay(value: object, where: str) -> Delay:
    """A Delay from a rule's `delay`: a duration, "uniform:LOW,HIGH" or
    "lognormal:p50=A,p99=B"; every mistake one line naming `where` and the key."""
    text = value.strip() if isinstance(value, str) else value
    form, colon, rest = text.partition(":") if isinstance(text, str) else ("", "", "")
    if not colon:
        try:
            fixed = seconds(value)
        except ValueError:
            raise BadValue(f"{where}: delay {value!r}: expected {_FORMS}") from None
        if not 0 < fixed <= LONGEST:
            raise BadValue(f"{where}: delay {value!r}: must be longer than 0 and at most a year")
        return Delay("fixed", fixed)
    parts = [p.strip() for p in rest.split(",")]
    if form.strip() == "uniform":
        if len(parts) != 2:
            raise BadValue(f"{where}: delay {value!r}: expected uniform:LOW,HIGH (e.g. uniform:10ms,200ms)")
        low, high = (_span(p, where, "delay uniform") for p in parts)
        if not low < high:
            raise BadValue(f"{where}: delay {value!r}: LOW must be less than HIGH")
        return Delay("uniform", low, high)
    if form.strip() == "lognormal":
        named = dict(p.partition("=")[::2] for p in parts)
        if len(parts) != 2 or sorted(k.strip() for k in named) != ["p50", "p99"]:
            raise BadValue(
                f"{where}: delay {value!r}: expected lognormal:p50=A,p99=B (e.g. lognormal:p50=5ms,p99=200ms)"
            )
        p50, p99 = (_span(named[k].strip(), where, f"delay {k}") for k in ("p50", "p99"))
        if not 0 < p50 < p99:
            raise BadValue(f"{where}: delay {value!r}: p50 must be above 0 and p99 above p50")
        return Delay("lognormal", p50, p99)
    raise BadValue(f"{where}: delay {value!r}: expected {_FORMS}")


def _span(value: object, where: str, key: str) -> float:
    """A duration of at most a year (as events' stalls): longer is a mistake, not a delay."""
    s = parse_duration(value, where, key)
    if s > LONGEST:
        raise BadValue(f"{where}: {key} {value!r}: at most a year")
    return s
