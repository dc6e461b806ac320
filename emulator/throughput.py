"""Throughput limits from the parameters: EFS's formulas for baseline, burst and
the credit cap, the throughput modes, and the client's own limits.  All rates
in bytes/s, sizes in bytes."""

from .params import MB, GiB, KiB, MiB, Params, TiB

MIN_RATE = 1 * KiB  # no limit falls below this, so every operation completes


def baseline_rate(p: Params, stored: float) -> float:
    """50 KiB/s per GiB stored, at least the floor (1 MiB/s since June 2020)."""
    return max(p.baseline_kibps_per_gib * KiB * stored / GiB, p.baseline_floor_mibps * MiB, MIN_RATE)


def burst_rate(p: Params, stored: float) -> float:
    """100 MiB/s, or 100 MiB/s per TiB stored above 1 TiB."""
    return max(p.burst_mibps * MiB, p.burst_mibps_per_tib * MiB * stored / TiB, MIN_RATE)


def credit_cap(p: Params, stored: float) -> float:
    return max(p.burst_credit_cap_min, p.burst_credit_cap_per_tib * stored / TiB)


def fs_pipe_rates(p: Params, stored: float) -> tuple[float, float, float, float]:
    """(hi, lo, earn, cap) of the metered-throughput pipe in bursting or provisioned
    mode: burst while credits last, else baseline; provisioned raises both to
    its rate (the higher figure applies)."""
    baseline, burst = baseline_rate(p, stored), burst_rate(p, stored)
    floor = p.provisioned_mibps * MiB if p.throughput_mode == "provisioned" else 0.0
    return max(burst, baseline, floor), max(baseline, floor), baseline, credit_cap(p, stored)


def client_pipe_rates(p: Params) -> tuple[float, float, float, float] | None:
    """(hi, lo, earn, cap) of the client's pipe on real bytes: the lower of EFS's
    per-client limit and the client's network, whose burst rate holds while its
    credits last; None if neither limits."""
    per_client = p.per_client_mibps * MiB
    burst = p.client_network_mbps * MB
    base = p.client_network_baseline_mbps * MB if burst and p.client_network_baseline_mbps else burst
    hi = min((r for r in (per_client, burst) if r), default=0.0)
    lo = min((r for r in (per_client, base) if r), default=0.0)
    if not hi:
        return None
    return hi, max(lo, MIN_RATE), lo, p.client_network_credit


def elastic_rates(p: Params) -> tuple[float, float]:
    """(read, write) limits of the file system in elastic mode; 0 for none."""
    return p.elastic_read_gibps * GiB, p.elastic_write_gibps * GiB
