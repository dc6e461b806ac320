"""Aligned plain-text tables, the figures in them, and text others chose, for the terminal."""


def table(head: list[str], rows: list[list[str]], align: str) -> str:
    """`align` has one letter per column: l (text) or r (numbers).  Every cell is made
    printable (see printable): names in traces are chosen by whoever made them."""
    rows = [[printable(c) for c in row] for row in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


def printable(name: str) -> str:
    """A name another user chose (a process's, say) as a terminal may print it: no
    escape sequence gets through (each non-printable character is '?')."""
    return "".join(c if c.isprintable() else "?" for c in name)


def count(n: int, noun: str) -> str:
    """`n` and the noun, plural unless n is 1: "1 file", "2,048 files"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def ns_text(ns: float) -> str:
    """A duration with three significant digits and a unit: 850ns, 12.3µs, 4.56ms, 1.20s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return num_text(ns / scale) + unit
    return f"{ns:.0f}ns"


def num_text(x: float | None) -> str:
    """Three significant digits or more ("-" for none): 0.25, 12.5, 1,234."""
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def int_text(n: int) -> str:
    """A count with thousands separated: 20,000."""
    return f"{n:,}"


def pct_text(share: float | None) -> str:
    """A share as a percentage ("-" for none): 26.1 %."""
    return "-" if share is None else f"{100 * share:.1f} %"


def duration_text(s: float) -> str:
    """A duration in words, to the second: 35 s, 6 min 40 s, 2 h 5 min."""
    whole = round(s)
    if whole < 60:
        return f"{s:.1f} s" if s < 10 else f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s" if whole % 60 else f"{whole // 60} min"
    return f"{whole // 3600} h {whole % 3600 // 60} min" if whole % 3600 // 60 else f"{whole // 3600} h"
