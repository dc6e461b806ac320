"""Path globs as `fusetrace report --path` and fault rules take them."""

import re

from .errors import BadValue


def glob_regex(pattern: str, what: str = "--path") -> str:
    """The RE2 expression (to match a whole path) of a path glob: `*` and `?` stay within
    one name, `**` crosses `/` (and `**/` also matches no directory at all), `[abc]`,
    `[a-z]`, `[!abc]` a character class; anything else, `\\` included, stands for itself.
    A glob not starting with `/` matches at any depth, as if it began with `**/`.  A
    mistake is a BadValue naming `what` (the option or key that gave the glob)."""
    given = pattern
    if not pattern.startswith("/"):
        pattern = "**/" + pattern
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            j = i + 2
            while j < n and pattern[j] == "*":
                j += 1
            if j < n and pattern[j] == "/" and (i == 0 or pattern[i - 1] == "/"):
                out.append("(?:.*/)?")
                j += 1
            else:
                out.append(".*")
            i = j
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] in "!^"
            j += negate
            first = j
            if j < n and pattern[j] == "]":  # a ] first in the class is one of its characters
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                raise BadValue(f"{what} {given}: a [ opens a character class that has no ]; write [[] for a literal [")
            members = "".join("\\" + ch if ch in "\\[]^" else ch for ch in pattern[first:j])
            out.append(f"[^/{members}]" if negate else f"[{members}]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)
