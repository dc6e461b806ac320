"""The hub of a file system shared by clients on several hosts (emulator/shared.py), in Redis.

One exchange is one round trip: a Lua script, run by Redis atomically, appends the
client's report (its usage since the last, and its running totals) to the file system's
log (a stream), reads the others' reports
since the client's last, marks the client live and counts the live ones, and keeps
the stored size per source, all against Redis's own clock (TIME), so hosts whose
clocks differ agree on who is live.  Keys, for file system ID:

    fusetrace:{ID}:log       stream: one entry per report with usage or sets
    fusetrace:{ID}:clients   sorted set: client -> when it last reported (Redis time)
    fusetrace:{ID}:stored    hash: source -> bytes;  fusetrace:{ID}:sources  sorted set: source -> when
    fusetrace:{ID}:balance   the burst credit balance last reported
    fusetrace:{ID}:params    hash: every parameter set (fusetrace set) -> its last value
    fusetrace:{ID}:totals    hash: client -> all the usage it has reported
    fusetrace:{ID}:base      the parameters every client mounts with (see _JOIN)

Calls block (with a timeout): run exchange() off the trio loop (emulation.py does).
"""

import json
import math
import threading
from urllib.parse import parse_qsl, unquote, urlsplit

import redis

from ..emulator.params import ParamValue
from ..emulator.shared import CLIENT_TTL, SOURCE_TTL, Reply, Report
from ..errors import BadValue

TIMEOUT_S = 0.25  # no exchange waits longer than this for Redis; the mount serves on regardless
LOG_LENGTH = 100_000  # reports kept: minutes of a fleet's history, for a client catching up after an outage
BATCH = 1000  # reports one answer holds at most: a client catching up exchanges again at once for more
KEEP_MS = 86_400_000  # a file system's keys go a day after its last exchange


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


_EXCHANGE = """
local p, client, cursor, usage, sets = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local source, stored, balance = ARGV[5], ARGV[6], ARGV[7]
local client_ttl, source_ttl, keep = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local totals, announce, batch, keep_ms = ARGV[11], ARGV[12], tonumber(ARGV[13]), ARGV[14]
local base, known_params = ARGV[15], ARGV[16]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZADD', p .. ':clients', now, client)
redis.call('ZREMRANGEBYSCORE', p .. ':clients', '-inf', now - client_ttl)
local clients = redis.call('ZCARD', p .. ':clients')
if tonumber(stored) >= 0 then
  redis.call('HSET', p .. ':stored', source, stored)
  redis.call('ZADD', p .. ':sources', now, source)
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', p .. ':sources', '-inf', now - source_ttl)) do
  redis.call('HDEL', p .. ':stored', gone)
end
redis.call('ZREMRANGEBYSCORE', p .. ':sources', '-inf', now - source_ttl)
local total, any = 0, 0
for _, v in ipairs(redis.call('HVALS', p .. ':stored')) do total, any = total + tonumber(v), 1 end
local prior = ''
if clients > 1 then prior = redis.call('GET', p .. ':balance') or '' end
if balance ~= '' then redis.call('SET', p .. ':balance', balance) end
if announce == '1' then  -- what a Redis restarted without persistence lost, from a live client's copy
  if base ~= '' then redis.call('SET', p .. ':base', base, 'NX') end
  if known_params ~= '' then  -- never over a value set since: the sets below come after
    for k, v in pairs(cjson.decode(known_params)) do redis.call('HSETNX', p .. ':params', k, cjson.encode(v)) end
  end
end
for _, kv in ipairs(cjson.decode(sets)) do redis.call('HSET', p .. ':params', kv[1], cjson.encode(kv[2])) end
local known = false
local entries = {}
if cursor == '' then
  known = redis.call('HGETALL', p .. ':totals')
  local last = redis.call('XREVRANGE', p .. ':log', '+', '-', 'COUNT', 1)
  cursor = last[1] and last[1][1] or '0-0'
else
  entries = redis.call('XRANGE', p .. ':log', '(' .. cursor, '+', 'COUNT', batch)
  if #entries > 0 then cursor = entries[#entries][1] end
end
redis.call('HSET', p .. ':totals', client, totals)
if usage ~= '[]' or sets ~= '[]' or announce == '1' then
  redis.call('XADD', p .. ':log', 'MAXLEN', '~', keep, '*', 'c', client, 'u', usage, 't', totals)
end
for _, k in ipairs({':clients', ':stored', ':sources', ':balance', ':params', ':totals', ':log', ':base'}) do
  redis.call('PEXPIRE', p .. k, keep_ms)
end
local got = {}
for _, e in ipairs(entries) do
  local f = e[2]
  if f[2] ~= client then table.insert(got, f[2]); table.insert(got, f[4]); table.insert(got, f[6]) end
end
return {cursor, clients, any == 1 and tostring(total) or '', prior, #entries == batch and 1 or 0,
        redis.call('HGETALL', p .. ':params'), known, got}
"""

# A client about to mount: the file system's base parameters (emulator/shared.py
# file_system_base) as its live clients have them, or this client's when none is live
# (then they are the file system's from now on, and parameters set before are forgotten).
# The client is counted live at once, so that two mounting together with different
# parameters cannot both find none.  '' when clients are live but the base is gone (a
# Redis restarted empty): their next announce gives it back.
_JOIN = """
local p, client, base, client_ttl, keep_ms = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local live = redis.call('ZCOUNT', p .. ':clients', now - client_ttl, '+inf')
local held = redis.call('GET', p .. ':base')
if live > 0 and not held then return '' end  -- a Redis restarted empty: the live clients give it back
redis.call('ZADD', p .. ':clients', now, client)
redis.call('PEXPIRE', p .. ':clients', keep_ms)
if live == 0 then  -- a new file system, whatever the keys left from one before say
  redis.call('DEL', p .. ':params', p .. ':balance')
  redis.call('SET', p .. ':base', base, 'PX', keep_ms)
  return base
end
return held
"""


def check_url(url: str) -> str:
    """The URL if it names a Redis server (redis://, rediss:// or unix://) with a port and
    database redis-py will take as given (it takes a database that is not a number for 0);
    BadValue otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise BadValue(f"--shared {shown(url)}: expected a Redis URL, e.g. redis://127.0.0.1:6379/0")
    try:
        _ = parts.port  # (urllib checks the range as it reads it)
    except ValueError:
        raise BadValue(f"--shared {shown(url)}: the port is not a number from 0 to 65535") from None
    db = parts.path.strip("/") if parts.scheme != "unix" else ""
    for key, value in parse_qsl(parts.query):
        if key == "db":
            db = value
    db = unquote(db)
    if db and not (db.isascii() and db.isdigit()):
        raise BadValue(f"--shared {shown(url)}: the database {db!r} is not a number, e.g. redis://127.0.0.1:6379/0")
    return url


def shown(url: str) -> str:
    """The URL without its password (before the host, or ?password=), for stats, logs,
    messages and trace metadata."""
    parts = urlsplit(url)
    if parts.password is not None:
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rsplit('@', 1)[-1]}")
    query = (
        "&".join("password=***" if q.split("=", 1)[0] == "password" else q for q in parts.query.split("&"))
        if parts.query
        else ""
    )
    return parts._replace(query=query).geturl()


class RedisHub:
    """emulator.shared.Hub over Redis: one Lua script per exchange."""

    def __init__(self, url: str, fs_id: str):
        self.url, self.fs_id = check_url(url), fs_id
        self._redis = redis.Redis.from_url(
            url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S, retry_on_timeout=False
        )
        self._script = self._redis.register_script(_EXCHANGE)
        self._join = self._redis.register_script(_JOIN)
        self._base = ""  # the file system's base parameters, as JSON, once join() has agreed them
        # one call at a time: an exchange the loop abandoned at unmount still runs in its worker
        # thread, and would count the client live again after leave() had counted it out
        self._one_at_a_time = threading.Lock()
        self._left = False  # leave() was called: no exchange after it
        self._cursors: dict[str, str] = {}  # per client: the last report it read (none: joining)
        self.round_trips = 0

    def join(self, client: str, base: dict[str, ParamValue]) -> dict[str, ParamValue] | None:
        """The file system's base parameters as its live clients have them (`base` itself
        when none is live); None when they are live but Redis lost it (ask again after
        their next announce); redis.RedisError if Redis does not answer."""
        self._base = json.dumps(base, sort_keys=True, separators=(",", ":"))
        with self._one_at_a_time:
            held = _text(self._join(keys=[f"fusetrace:{self.fs_id}"], args=[client, self._base, CLIENT_TTL, KEEP_MS]))
        return json.loads(held) if held else None

    def exchange(self, report: Report) -> Reply:
        usage = json.dumps(report.usage, separators=(",", ":"))
        sets = json.dumps(report.sets, separators=(",", ":"))
        balance = "" if math.isnan(report.balance) else repr(report.balance)
        self.round_trips += 1
        with self._one_at_a_time:
            if self._left:  # an exchange the loop abandoned, late: it would count the client live again
                raise redis.ConnectionError("this client has left the file system")
            out = self._script(
                keys=[f"fusetrace:{self.fs_id}"],
                args=[
                    report.client,
                    self._cursors.get(report.client, ""),
                    usage,
                    sets,
                    report.source,
                    repr(report.stored),
                    balance,
                    CLIENT_TTL,
                    SOURCE_TTL,
                    LOG_LENGTH,
                    json.dumps(report.totals, separators=(",", ":")),
                    "1" if report.announce else "0",
                    BATCH,
                    KEEP_MS,
                    self._base,
                    "" if report.params is None else json.dumps(report.params, separators=(",", ":")),
                ],
            )
        cursor, clients, stored, prior, more, params, known, got = out
        self._cursors[report.client] = _text(cursor)
        reports = [
            (_text(got[i]), [tuple(u) for u in json.loads(got[i + 1])], [tuple(t) for t in json.loads(got[i + 2])])
            for i in range(0, len(got), 3)
        ]
        return Reply(
            reports=reports,
            params={_text(params[i]): json.loads(params[i + 1]) for i in range(0, len(params), 2)},
            known=None
            if not known
            else {
                _text(known[i]): [tuple(t) for t in json.loads(known[i + 1])]
                for i in range(0, len(known), 2)
                if _text(known[i]) != report.client
            },
            more=bool(more),
            clients=int(clients),
            stored=float(stored) if stored else -1.0,
            balance=float(prior) if prior else math.nan,
        )

    def leave(self, client: str) -> None:
        """`client` is gone: counted out of ClientConnections now, not when its report ages."""
        with self._one_at_a_time:
            self._left = True
            self._redis.zrem(f"fusetrace:{self.fs_id}:clients", client)
            self._redis.hdel(f"fusetrace:{self.fs_id}:totals", client)

    def close(self) -> None:
        self._redis.close()
