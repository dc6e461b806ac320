"""Aligned plain-text tables for the terminal."""


def table(head: list[str], rows: list[list[str]], align: str) -> str:
    """`align` has one letter per column: l (text) or r (numbers)."""
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                         for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])
