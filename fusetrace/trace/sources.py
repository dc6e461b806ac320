"""What a trace record is made of, by meaning: the request, where it is, who asked, the model's
account of it.  TraceWriter.add reads each column from the attribute of the same name, so
mypy checks every one by name; the server's types (Request, Site, a request context, the
process cache, the shaper's Ticket) fit these without knowing them: trace/ sits below
server/ and shaping/.  Read-only properties, so that a NamedTuple's field or a computed
property fits as well as a plain attribute.
"""

from typing import Protocol


class Operation(Protocol):
    """The request: the operation, the bytes asked for, and its kind as the trace names it
    (a write's by its mode)."""

    @property
    def op(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def label(self) -> str | None: ...


class Place(Protocol):
    """Where the request is: the inode (the directory, for an entry in it), the path, a
    second name, the offset."""

    @property
    def inode(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def path2(self) -> str | None: ...
    @property
    def offset(self) -> int: ...


class User(Protocol):
    """Whose request it is."""

    @property
    def uid(self) -> int: ...
    @property
    def gid(self) -> int: ...


class Process(Protocol):
    """The process that made it, the thread of it that did, and the process's name."""

    @property
    def pid(self) -> int: ...
    @property
    def tid(self) -> int: ...
    @property
    def comm(self) -> str: ...


class Account(Protocol):
    """The model's account of it: the gate that set its time, how that time splits, the
    NFS RPCs sent; None and 0 for an operation the model was not shown."""

    @property
    def gate(self) -> str | None: ...
    @property
    def wait_ns(self) -> int: ...
    @property
    def latency_ns(self) -> int: ...
    @property
    def transfer_ns(self) -> int: ...
    @property
    def nfs(self) -> str | None: ...
