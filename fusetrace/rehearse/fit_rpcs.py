"""`fusetrace fit`, per RPC: which records say what one RPC costs, and the keys fitted from them.

Every record names the RPCs it sent (`nfs`: the emulated client's, or in a trace of a real
mount the ones fit_infer.py inferred), and one latency for all of them: the model's
sample sum (`latency_ns`), or what the caller saw (`dur_ns` plus one FUSE round trip).  A
record's latency is an RPC's sample when the record sent that RPC alone, with these
readings of how the emulated client (emulator/nfsclient.py) accounts:

- `WRITE xN,COMMIT` (a flush of O_SYNC data): the COMMIT waits for the WRITEs, whose time
  is its wait (`wait_ns`); `latency_ns` is the COMMIT's alone.  In a trace of a real mount
  the WRITEs' time is in `dur_ns`: those records are left out, and so is a COMMIT the
  inference says waited for its file's write-back.
- `WRITE(write-back)`: a buffered write, charged the page cache's cost; its WRITE went in
  the background.  WRITE is fitted from the stable ones (O_DIRECT `WRITE`, a flush's one
  `WRITE(FILE_SYNC)` of O_SYNC data), and from a flush (or stat) that waited for the
  write-back of a file's one small buffered write since its last flush
  (`WRITE(FILE_SYNC)` with no latency of its own, an fsync after a small write): that
  WRITE started with the write (no dirty wait) and ended when the flush's wait did, so
  its time is the flush's start plus its wait less the write's start, less the bytes at
  the profile's rate.
- A name made right after the kernel's LOOKUP of it (create, mkdir...) and a flush of
  O_SYNC data are charged less by the time the caller already spent (nfsclient's
  `_earlier`): that time is added back, from the LOOKUP's record or the first O_SYNC
  write's start, where the record shows no wait (a make after an `ACCESS,LOOKUP` is left
  out: the LOOKUP's part of that sum is not known).  One charged nothing says only that
  its RPC took less than that time: its median is the most likely one of the model's
  lognormal (with its class's spread) given the samples and those bounds.
- Other compounds (`ACCESS,LOOKUP`, `COMMIT,CLOSE`, `OPEN,SETATTR`...) hold a sum.  An
  RPC seen alone fewer than MIN_RECORDS times takes them, less the medians of the other
  RPCs (fitted from their records alone): the median of the difference.
"""

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..emulator.params import LATENCY_CLASSES, RPC_LATENCIES, Params
from ..texttable import int_text

MIN_RECORDS = 20  # fewer records of an RPC say nothing reliable about its percentiles
Z99 = 2.3263478740408408  # the standard normal's 99th percentile (emulator/latency.py)
_ONE_WRITE = 64 * 1024  # a write-back this small: its bytes' time is a small part of its WRITE's
_ABSORB_NS = 2_000_000  # nfsclient._ABSORB_S: a make this soon after its LOOKUP's reply was charged less

# The model's latency class of every RPC the emulated client sends.
RPC_CLASS = {
    **dict.fromkeys(
        ("GETATTR", "LOOKUP", "OPEN", "CLOSE", "READDIRPLUS", "STATFS", "ACCESS", "READLINK", "GETXATTR", "LISTXATTR"),
        "meta_read",
    ),
    **dict.fromkeys(
        ("SETATTR", "OPEN(create)", "CREATE", "LINK", "REMOVE", "RENAME", "SETXATTR", "REMOVEXATTR"), "meta_write"
    ),
    "READ": "read",
    "WRITE": "write",
    "COMMIT": "commit",
}
KEY_OF = {rpc: key for key, (_, rpcs) in RPC_LATENCIES.items() for rpc in rpcs}  # RPCs timed by a key of their own
_MAKES = frozenset(("create", "mknod", "mkdir", "symlink"))
_FLUSHES = frozenset(("flush", "fsync", "setattr"))  # send a file's O_SYNC data (nfsclient._flush_data)

ALONE, AFTER_WRITES, LESS_LOOKUP, LESS_SYNC, COMPOUND = (
    "alone",
    "after their WRITEs (latency_ns is the COMMIT's; the WRITEs' time is its wait)",
    "names made after their LOOKUP, its time added back",
    "flushes of O_SYNC data, the time since the first write added back",
    "in compounds, less the other RPCs' medians",
)
AFTER_WRITE_BACK = (
    "flushes that waited for a buffered write's one WRITE: from the write's start to the flush's "
    "end of wait, less its bytes at the profile's rate"
)
CENSORED = (
    "charged nothing, as the time taken off was longer: each counted as under that time, the median "
    "the most likely of a lognormal of its class's spread"
)


@dataclass
class Key:
    """One line of the fitted profile: `key = value  # how`; key "#": a comment line."""

    key: str
    value: float | int | str
    how: str

    def line(self) -> str:
        value = f'"{self.value}"' if isinstance(self.value, str) else _number(self.value)
        return f"{self.key} = {value}  # {self.how}"


@dataclass
class Row:
    """What the estimation reads of a record: `nfs` and `latency_ns` are the model's (the
    emulated mount's, or the inference's), `ms` the latency a sample would take."""

    start_ns: int
    end_ns: int
    op: str
    inode: int
    path: str
    nfs: str | None
    latency_ns: int
    wait_ns: int
    transfer_ns: int
    size: int
    kind: str | None
    ms: float


@dataclass
class Samples:
    """Per RPC, its latency samples (ms), their bytes and transfer time, and how each was read."""

    ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    sizes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    transfer: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    how: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    # Charged nothing after the time the caller had spent was taken off: the RPC's sample
    # was under that time (ms), all that is known of it.
    censored: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    compounds: list[tuple[list[str], float]] = field(default_factory=list)
    # samples whose tail is not the RPC's own: a WRITE read off the flush that waited for it
    # holds the queues the write-back met too (its file's slots, its stripe), which a
    # rehearsal adds again, so it counts towards the median only
    loose: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    write_back = 0  # WRITE(write-back) records: their WRITE's latency is not in the trace

    def add(self, rpc: str, ms: float, size: int, transfer_ns: int, how: str) -> None:
        self.ms[rpc].append(ms)
        self.sizes[rpc].append(size)
        self.transfer[rpc].append(transfer_ns)
        self.how[rpc][how] += 1
        if how == AFTER_WRITE_BACK:
            self.loose[rpc].append(ms)


def terms(nfs: str) -> list[tuple[str, int]]:
    """The RPCs of an `nfs` value and how many of each: "WRITE x4,COMMIT" -> WRITE 4, COMMIT 1."""
    out = []
    for part in nfs.split(","):
        name, _, times = part.partition(" x")
        out.append((name, int(times) if times.isdigit() else 1))
    return out


def collect(rows: Iterable[Row], modelled: bool, write_rate: float) -> Samples:
    """The samples of every RPC from `rows`, in start order (module docstring);
    `write_rate`: the bytes a second a WRITE's data took (the trace's profile's, else the
    base's), to take a write-back's bytes off its time."""
    s = Samples()
    looked: dict[tuple[int, str], tuple[int, int]] = {}  # (directory, name): (LOOKUP's reply at, its time)
    staged: dict[int, tuple[int, int]] = {}  # file: (first O_SYNC write's start, bytes staged)
    buffered: dict[int, list[Row]] = defaultdict(list)  # file: its buffered writes since its last flush
    for r in rows:
        if r.op == "write" and r.kind == "sync":
            first, nbytes = staged.get(r.inode, (r.start_ns, 0))
            staged[r.inode] = (first, nbytes + r.size)
        elif r.nfs == "WRITE(write-back)":
            buffered[r.inode].append(r)
        sync = staged.pop(r.inode, None) if r.op in _FLUSHES else None
        if not r.nfs:
            continue
        parts = terms(r.nfs)
        if "LOOKUP" in r.nfs:  # in a compound (after an ACCESS) its own part is not known: -1
            looked[(r.inode, r.path)] = (r.end_ns, r.latency_ns + r.wait_ns if r.nfs == "LOOKUP" else -1)
        if any(name == "WRITE(write-back)" for name, _ in parts):
            s.write_back += 1
            continue
        if parts[0][0] == "WRITE(FILE_SYNC)" and sync is None:  # waited for write-back under way
            written = buffered.pop(r.inode, [])
            if modelled and len(written) == 1 and written[0].wait_ns <= 0 and written[0].size <= _ONE_WRITE:
                # its one WRITE went at the write's start and ended when the wait did
                w = written[0]
                ms = (r.start_ns + r.wait_ns - w.start_ns - w.size / write_rate * 1e9) / 1e6
                if ms > 0:
                    s.add("WRITE", ms, w.size, 0, AFTER_WRITE_BACK)
            parts = parts[1:]  # the wait has no latency of its own: what follows has it all
            if not parts or not modelled:
                continue
        elif r.op in _FLUSHES:
            buffered.pop(r.inode, None)
        if any(name == "WRITE(FILE_SYNC)" for name, _ in parts) and (len(parts) > 1 or r.latency_ns <= 0):
            continue  # mixed with other RPCs: no WRITE's own time
        if not modelled and parts[-1][0] == "COMMIT" and r.wait_ns > 0:
            continue  # waited for its file's write-back, whose time dur_ns holds too
        if len(parts) > 1 and parts[-1][0] == "COMMIT" and parts[0][0] == "WRITE":
            if not modelled:
                continue  # dur_ns holds the WRITEs too
            parts, how = parts[1:], AFTER_WRITES
        elif len(parts) > 2 and parts[1][0] == "COMMIT" and parts[0][0] == "WRITE":  # ...,COMMIT,CLOSE
            if not modelled:
                continue
            parts, how = parts[1:], COMPOUND
        else:
            how = ALONE
        ms, size = r.ms, r.size
        if modelled and r.wait_ns <= 0:  # charged less by what the caller already spent (_earlier)
            if r.op in _MAKES:
                before = looked.pop((r.inode, r.path), None)
                if before is not None and r.start_ns - before[0] <= _ABSORB_NS:
                    if before[1] < 0:
                        continue
                    ms, how = ms + before[1] / 1e6, LESS_LOOKUP
            elif sync is not None:
                ms, how = ms + (r.start_ns - sync[0]) / 1e6, LESS_SYNC
        if sync is not None and parts[0][0] == "WRITE(FILE_SYNC)":
            size = sync[1]
        if len(parts) == 1 and parts[0][1] == 1:
            name = "WRITE" if parts[0][0] == "WRITE(FILE_SYNC)" else parts[0][0]
            if name in RPC_CLASS and how in (LESS_LOOKUP, LESS_SYNC) and r.latency_ns <= 0:
                s.censored[name].append(ms)
                s.how[name][CENSORED] += 1
            elif name in RPC_CLASS:
                s.add(name, ms, size, r.transfer_ns, how)
        else:
            s.compounds.append(([name for name, n in parts for _ in range(n)], ms))
    return s


def separate(s: Samples) -> None:
    """Samples from compounds for the RPCs seen alone fewer than MIN_RECORDS times: the
    compound's latency less the medians of its other RPCs, each fitted from enough
    records of its own."""
    known = {rpc: statistics.median(v) for rpc, v in s.ms.items() if len(v) >= MIN_RECORDS}
    for names, ms in s.compounds:
        for rpc in set(names):
            if rpc in known or rpc not in RPC_CLASS or names.count(rpc) != 1:
                continue
            others = [n for n in names if n != rpc]
            if all(n in known for n in others):
                rest = ms - sum(known[n] for n in others)
                if rest > 0:
                    s.add(rpc, rest, 0, 0, COMPOUND)


def latency_keys(s: Samples, base: Params, source: str) -> list[Key]:
    """Per latency class its median and 99th percentile from the RPCs it alone times; per
    RPC with a key of its own (params.RPC_LATENCIES) its median.  `source`: how a
    sample's latency was read."""
    out: list[Key] = []
    for cls in LATENCY_CLASSES:
        plain = sorted(r for r, c in RPC_CLASS.items() if c == cls and r not in KEY_OF)
        ms = [m for r in plain for m in s.ms.get(r, [])]
        names = "/".join(plain)
        if len(ms) >= MIN_RECORDS:
            median = statistics.median(ms)
            said = f"{_seen(s, plain)}: {source}"
            out.append(Key(f"{cls}_latency_ms", round(median, 4), f"median of {said}"))
            tail = _without(ms, [m for r in plain for m in s.loose.get(r, [])])
            if len(tail) >= MIN_RECORDS:
                p99 = min(max(quantile(tail, 0.99), median), 999 * median)
                how = f"99th percentile of the same {int_text(len(ms))}"
                if len(tail) < len(ms):
                    how = f"99th percentile of the {int_text(len(tail))} of them read alone, not off a flush's wait"
            else:
                spread = getattr(base, f"{cls}_latency_p99_ms") / getattr(base, f"{cls}_latency_ms")
                p99 = median * spread
                how = (
                    f"the median times the base's spread ({spread:.3g}): read off flushes' waits, their tails "
                    f"hold the write-back's queues as well"
                )
            out.append(Key(f"{cls}_latency_p99_ms", round(p99, 4), how))
            continue
        out.append(Key("#", "", f"# {cls}: {_count(len(ms), names)}, under {MIN_RECORDS}: the base's latency stands"))
        # The RPCs with keys of their own keep this class's spread: from theirs, each over its median.
        spread = [
            m / statistics.median(v)
            for r, v in s.ms.items()
            if RPC_CLASS.get(r) == cls and r in KEY_OF and len(v) >= MIN_RECORDS
            for m in v
        ]
        if len(spread) >= MIN_RECORDS:
            median = getattr(base, f"{cls}_latency_ms")
            ratio = min(max(quantile(spread, 0.99), 1.0), 999.0)
            out.append(
                Key(
                    f"{cls}_latency_p99_ms",
                    round(median * ratio, 4),
                    f"the base's median times {ratio:.3g}, the 99th percentile of {int_text(len(spread))} "
                    f"samples of this class's RPCs with keys of their own, each over its RPC's median",
                )
            )
    for key, (cls, rpcs) in RPC_LATENCIES.items():
        ms = [m for r in rpcs for m in s.ms.get(r, [])]
        under = [m for r in rpcs for m in s.censored.get(r, [])]
        names = "/".join(rpcs)
        if len(ms) < MIN_RECORDS:
            said = _count(len(ms), names)
            if under:  # the trace says only that they took less than what was taken off
                said += (
                    f" and {int_text(len(under))} charged nothing, as they took less than the time the caller "
                    f"had spent (median {statistics.median(under):.3g} ms)"
                )
            out.append(Key("#", "", f"# {key}: {said}, under {MIN_RECORDS}: the base's stands"))
            continue
        said = f"{_seen(s, list(rpcs))}: {source}"
        median = censored_median(ms, under, _sigma(out, base, cls)) if under else statistics.median(ms)
        out.append(Key(f"{key}_latency_ms", round(median, 4), f"median of {said}"))
    return out


def _sigma(fitted: list[Key], base: Params, cls: str) -> float:
    """The spread (a lognormal's sigma) of class `cls`: as fitted, else the base's."""
    got = {k.key: k.value for k in fitted}
    median = float(got.get(f"{cls}_latency_ms", getattr(base, f"{cls}_latency_ms")))
    p99 = float(got.get(f"{cls}_latency_p99_ms", getattr(base, f"{cls}_latency_p99_ms")))
    return math.log(p99 / median) / Z99 if median > 0 and p99 > median else 0.0


def censored_median(exact: list[float], under: list[float], sigma: float) -> float:
    """The median of a lognormal of spread `sigma` most likely to give the samples `exact`
    and samples known only to lie under the bounds `under` (ms): the root of the
    log-likelihood's derivative in log-median, which falls as the log-median grows."""
    logs = [math.log(m) for m in exact if m > 0]
    bounds = [math.log(b) for b in under if b > 0]
    if sigma <= 0 or not logs:
        return statistics.median(exact or under)

    def slope(mu: float) -> float:
        mills = 0.0
        for b in bounds:
            z = (b - mu) / sigma
            cdf = 0.5 * math.erfc(-z / math.sqrt(2))
            mills += math.exp(-z * z / 2) / math.sqrt(2 * math.pi) / cdf if cdf > 1e-300 else -z
        return sum(x - mu for x in logs) / sigma - mills

    low, high = min(logs + bounds) - 10 * sigma, max(logs + bounds) + 10 * sigma
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if slope(mid) > 0 else (low, mid)
    return math.exp((low + high) / 2)


def _seen(s: Samples, rpcs: list[str]) -> str:
    """ "609 COMMITs (412 alone, 197 after their WRITEs...)": how many samples, and how read."""
    how: Counter[str] = Counter()
    for r in rpcs:
        how.update(s.how.get(r, Counter()))
    n = sum(how.values())
    seen = "/".join(r for r in rpcs if s.ms.get(r))
    parts = ", ".join(f"{int_text(k)} {h}" for h, k in how.most_common())
    return f"{int_text(n)} {seen} records ({parts})"


def _count(n: int, names: str) -> str:
    return f"{int_text(n)} records of one {names}" if n else f"no records of one {names}"


def slope_ms_per_byte(ms: list[float], sizes: list[int]) -> float:
    """Latency against size: the least-squares slope through the median of each size
    seen at least 5 times, when the sizes span a factor of 4; else 0."""
    by_size: dict[int, list[float]] = {}
    for m, s in zip(ms, sizes):
        by_size.setdefault(s, []).append(m)
    points = [(s, statistics.median(v)) for s, v in by_size.items() if len(v) >= 5 and s > 0]
    if len(points) < 2 or max(s for s, _ in points) < 4 * min(s for s, _ in points):
        return 0.0
    xs, ys = zip(*points)
    return max(statistics.linear_regression(xs, ys).slope, 0.0)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.1f}"


def _without(samples: list[float], removed: list[float]) -> list[float]:
    """`samples` less one occurrence of each of `removed` (all of which are among them)."""
    if not removed:
        return samples
    left = Counter(removed)
    out = []
    for m in samples:
        if left[m]:
            left[m] -= 1
        else:
            out.append(m)
    return out
