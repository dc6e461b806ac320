"""One emulated file system, several clients: what they share and how.

EFS's burst credits, throughput, IOPS limit and per-file and per-directory
serialisation belong to the file system; the network, the per-client throughput
limit and the dirty data belong to each client.  Each client keeps its own model
(emulator/model.py) and so its own copy of the shared gates.  Every few
milliseconds it reports what it put through them (Model.take_usage) to a hub and
takes back what the other clients put through theirs since, which it puts through
its own copy (Model.absorb).  So every copy carries the whole file system's load:
a client's requests queue behind the others' for throughput, IOPS tokens and a
file's write slots, every copy spends the credits at the aggregate rate, and the
sum of what the clients get stays at the file system's limits.  Nothing on a
request's path waits for the hub: the exchange runs beside the requests, and a
client whose hub is away serves on its own copy, keeping what it has not reported
until the hub answers again.

The price of the copies being a few milliseconds apart: within one exchange
period, clients starting at once may together go over a limit by what it allows
in that period; it is paid back in the next.  docs/SCALE.md measures this.

A hub is anything with `exchange(Report) -> Reply`: LocalHub here, for clients
in one process (and for the virtual-time tests), and fusetrace.shaping.redis_hub
for clients on several hosts.  Pure and clock-free, like the model.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from .model import Model, Usage
from .params import Params, ParamValue, ProfileError

_Sum = list[Any]  # [operations, bytes, IOPS cost] added up (scaled, they need not stay whole)

Totals = list[tuple[int, int, int, float]]  # per class index: operations, bytes, IOPS cost, ever reported


@dataclass
class Report:
    """What a client tells the hub at an exchange."""

    client: str
    now: float  # the client's model time (LocalHub's clock; Redis keeps its own)
    usage: list[Usage] = field(default_factory=list)
    totals: Totals = field(default_factory=list)  # all the usage this client has ever reported, this included
    announce: bool = False  # to be passed on even without usage or sets: its totals (once a second)
    sets: list[tuple[str, ParamValue]] = field(default_factory=list)  # parameters changed here (fusetrace set)
    source: str = ""  # which backing directory the client measures, so that one measured twice counts once
    stored: float = -1.0  # its measured bytes (-1: not measured since the last exchange)
    balance: float = math.nan  # the burst credit balance as this client sees it
    # with an announce: every file system parameter set so far as this client knows it, for a hub
    # that lost them (a Redis restarted without persistence) to take back
    params: dict[str, ParamValue] | None = None


@dataclass
class Reply:
    """What the hub answers: the other clients' reports since this client's last."""

    reports: list[tuple[str, list[Usage], Totals]] = field(default_factory=list)  # (client, usage, totals)
    # every file system parameter set on any client: its last value
    params: dict[str, ParamValue] = field(default_factory=dict)
    known: dict[str, Totals] | None = None  # on joining: every client's totals so far (its history, not taken in)
    more: bool = False  # the hub has more reports for this client than one answer holds: exchange again now
    clients: int = 1  # live clients, this one included
    stored: float = -1.0  # the bytes of every live source (-1: none reported)
    balance: float = math.nan  # the last balance another live client reported (nan: none live)


class Hub(Protocol):
    def exchange(self, report: Report) -> Reply: ...


_CLIENTS_OWN = frozenset(("seed", "per_client_mibps", "buffered_write_ms", "xattrs", "description"))


def clients_own(key: str) -> bool:
    """Whether a parameter belongs to each client (its network, its limit, its NFS mount
    options, its page cache) rather than to the file system, and so is not shared."""
    return key in _CLIENTS_OWN or key.startswith(("client_", "nfs_"))


def file_system_base(params: Params) -> dict[str, ParamValue]:
    """The file system's own parameters a client mounts with (its profile and --set),
    which every client of one file system must agree on: the burst credit balance, a
    state a joining client takes from the others, left out."""
    return {
        f.name: getattr(params, f.name)
        for f in fields(params)
        if not clients_own(f.name) and f.name != "burst_credit_balance"
    }


def base_differences(ours: Mapping[str, object], theirs: Mapping[str, object], most: int = 3) -> list[str]:
    """Where two clients' file_system_base differ, as 'key: VALUE here, VALUE there'."""
    keys = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    return [f"{k} {ours.get(k)!r} here, {theirs.get(k)!r} on its clients" for k in keys[:most]]


class SharedClient:
    """A model's side of the exchange.  report() and apply() run where the model runs;
    the hub's exchange may run elsewhere in between (a worker thread for Redis); a failed
    exchange gives its report back with restore(), to go with the next."""

    def __init__(self, model: Model, client: str, source: str = ""):
        model.share()
        self.model, self.client, self.source = model, client, source
        self.joined = False  # False until the first reply: a new client takes the file system's balance
        self._params: dict[str, ParamValue] = {}  # the file system's parameters as last heard from the hub
        self._sets: list[tuple[str, ParamValue]] = []
        self._stored = -1.0
        self._pending: list[Usage] = []  # what the hub did not take yet
        self._totals: dict[int, _Sum] = {}  # per class: all this client has put in reports
        self._absorbed: dict[str, dict[int, _Sum]] = {}  # per other client and class: what was taken in
        self._announced = -math.inf  # when a report last went with the totals alone
        # other clients' sets this client's parameters could not take, by key: until one of it is taken
        self.refused: dict[str, str] = {}

    def changed(self, key: str, value: ParamValue) -> None:
        """A parameter set on this client (already applied here), for the others if it is
        the file system's."""
        if not clients_own(key):
            self._sets.append((key, value))
            self._params[key] = value  # applied here already: the hub's copy of it is no news

    def measured(self, nbytes: float) -> None:
        """This client's source measured at `nbytes`, for the file system's stored size."""
        self._stored = float(nbytes)

    def report(self, now: float) -> Report:
        usage = self.model.take_usage()
        if self._pending:  # what a failed exchange did not deliver goes with this one
            usage, self._pending = _merged(self._pending + usage), []
        for i, _, n, nbytes, cost in usage:
            _add(self._totals.setdefault(i, [0, 0, 0.0]), n, nbytes, cost)
        out = Report(
            self.client,
            now,
            usage=usage,
            totals=[(i, *t) for i, t in sorted(self._totals.items())],
            sets=self._sets,
            source=self.source,
            stored=self._stored,
            balance=self.model.metrics(now)["BurstCreditBalance"],
        )
        if now - self._announced >= ANNOUNCE_EVERY:
            out.announce, self._announced, out.params = True, now, dict(self._params)
        self._sets, self._stored = [], -1.0
        return out

    def restore(self, report: Report) -> None:
        """A report the hub did not take: kept, merged (so what is kept grows with the files
        touched, not with the operations), for the next exchange.  Its totals stand: a report
        the hub did take whose answer was lost is then not counted twice (apply())."""
        self._pending = _merged(self._pending + report.usage)
        for i, _, n, nbytes, cost in report.usage:
            _add(self._totals[i], -n, -nbytes, -cost)
        self._sets = report.sets + self._sets
        if self._stored < 0:
            self._stored = report.stored

    def apply(self, reply: Reply, now: float) -> None:
        """The others' usage through this client's gates, the file system's parameters that
        changed, the count of clients and the stored size; on joining, every parameter set
        so far, the others' history (known, not taken in) and the file system's balance."""
        model = self.model
        for key, value in reply.params.items():  # in the hub's order: the last set of a key wins everywhere
            if key not in self._params or self._params[key] != value:
                self._params[key] = value
                if not self.joined and key == "burst_credit_balance":
                    continue  # a state, not a setting: a client joining takes the balance as it is now
                if not clients_own(key):
                    self._take(key, value, now)
        if not self.joined:
            self.joined = True
            for client, totals in (reply.known or {}).items():
                self._absorbed[client] = {i: [n, b, c] for i, n, b, c in totals}
            if not math.isnan(reply.balance):
                self._take("burst_credit_balance", reply.balance, now)
        merged: dict[str, tuple[list[Usage], Totals]] = {}
        for client, usage, totals in reply.reports:  # one client's reports taken in together
            before = merged.get(client, ([], []))[0]
            merged[client] = (before + usage, totals)
        for client, (usage, totals) in merged.items():
            model.absorb(self._due(client, _merged(usage), totals), now)
        model.clients = max(1, reply.clients)
        if reply.stored >= 0:
            model.set_stored_bytes(reply.stored, now)

    def _take(self, key: str, value: ParamValue, now: float) -> None:
        """Another client's value of `key` set here, or refused and listed where this client's
        own overrides make it inconsistent."""
        try:
            self.model.set(key, value, now)
        except ProfileError as exc:
            self.refused[key] = str(exc)
        else:
            self.refused.pop(key, None)

    def _due(self, client: str, usage: list[Usage], totals: Totals) -> list[Usage]:
        """What to take in of `client`'s usage: made to agree with its totals against what
        was taken in from it before.  Reports lost (a Redis restarted before this client read
        them) leave the totals ahead: the difference is taken in, per class, without a file.
        A report sent twice (its answer was lost, so it went again) leaves them behind: each
        of operations, bytes and cost is scaled down to what the totals allow.  A client
        unknown when this one joined joined later: everything it reported counts."""
        sums: dict[int, _Sum] = {}
        for i, _, n, nbytes, cost in usage:
            _add(sums.setdefault(i, [0, 0, 0.0]), n, nbytes, cost)
        seen = self._absorbed.setdefault(client, {})
        out: list[Usage] = []
        for i, n, nbytes, cost in totals:
            was = seen.get(i, [0, 0, 0.0])
            due = (n - was[0], nbytes - was[1], cost - was[2])
            got = sums.get(i, [0, 0, 0.0])
            mine = [u for u in usage if u[0] == i]
            ops = _fit([u[2] for u in mine], due[0])
            nbytes_each = _fit([u[3] for u in mine], due[1])
            cost_share = min(1.0, max(due[2], 0.0) / got[2]) if got[2] > 0 else 1.0
            out += [
                (i, key, k, b, c * cost_share) for (_, key, _, _, c), k, b in zip(mine, ops, nbytes_each) if k or b or c
            ]
            gap = (max(due[0] - got[0], 0), max(due[1] - got[1], 0), max(due[2] - got[2], 0.0))
            if any(gap):
                out.append((i, 0, *gap))
            seen[i] = [n, nbytes, cost]
        return out


def _fit(values: list[int], total: int) -> list[int]:
    """`values` as they are if they add up to `total` or less; else scaled down to add up to
    exactly `total` (at least 0), the whole numbers spread by largest remainder."""
    have = sum(values)
    if have <= total:
        return values
    if total <= 0 or have <= 0:
        return [0] * len(values)
    exact = [v * total / have for v in values]
    out = [int(x) for x in exact]
    for j in sorted(range(len(values)), key=lambda j: exact[j] - out[j], reverse=True)[: total - sum(out)]:
        out[j] += 1
    return out


def _add(total: _Sum, n: int, nbytes: int, cost: float) -> None:
    total[0] += n
    total[1] += nbytes
    total[2] += cost


def _merged(usage: list[Usage]) -> list[Usage]:
    """Usage with the entries for one class and key added up."""
    out: dict[tuple[int, int], _Sum] = {}
    for i, key, n, nbytes, cost in usage:
        _add(out.setdefault((i, key), [0, 0, 0.0]), n, nbytes, cost)
    return [(i, key, n, nbytes, cost) for (i, key), (n, nbytes, cost) in out.items()]


EXCHANGE_EVERY = 0.02  # s between a client's exchanges with the hub
ANNOUNCE_EVERY = 1.0  # s: an idle client's totals go round this often, so that reports lost are made up
CLIENT_TTL = 5.0  # s: a client that has not reported for this long is gone
SOURCE_TTL = 180.0  # s: a source whose size has not been reported for this long is gone (measured each minute)


class LocalHub:
    """A hub for clients in one process: a log of reports, a read position per client,
    the file system's parameters in the order they were set, every client's latest
    totals, and clients counted live while they have reported within CLIENT_TTL of the
    latest report (in the clients' model time)."""

    def __init__(self) -> None:
        self._log: list[Report] = []
        self._read: dict[str, int] = {}
        self._seen: dict[str, float] = {}
        self._stored: dict[str, tuple[float, float]] = {}  # source: (bytes, when reported)
        self._params: dict[str, ParamValue] = {}
        self._totals: dict[str, Totals] = {}
        self._balance = math.nan

    def exchange(self, report: Report) -> Reply:
        joining = report.client not in self._read
        known = {c: t for c, t in self._totals.items() if c != report.client} if joining else None
        start = self._read.get(report.client, len(self._log))  # a new client starts from now
        others = [r for r in self._log[start:] if r.client != report.client]
        if report.usage or report.sets or report.announce:
            self._log.append(report)
        self._read[report.client] = len(self._log)
        self._totals[report.client] = report.totals
        for key, value in report.sets:
            self._params.pop(key, None)
            self._params[key] = value  # last set last
        now = max([report.now, *self._seen.values()])
        live_before = any(c != report.client and t > now - CLIENT_TTL for c, t in self._seen.items())
        self._seen[report.client] = report.now
        self._seen = {c: t for c, t in self._seen.items() if t > now - CLIENT_TTL}
        if report.stored >= 0:
            self._stored[report.source] = (report.stored, report.now)
        live = [b for b, t in self._stored.values() if t > now - SOURCE_TTL]
        balance, self._balance = (self._balance if live_before else math.nan), report.balance
        return Reply(
            reports=[(r.client, r.usage, r.totals) for r in others],
            params=dict(self._params),
            known=known,
            clients=len(self._seen),
            stored=sum(live) if live else -1.0,
            balance=balance,
        )
