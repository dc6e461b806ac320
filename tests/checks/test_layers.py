"""The package's layers, read from the source: imports go one way, from the CLI down to
the model, and the model stays pure (docs/ARCHITECTURE.md draws the same picture)."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Each part of the package, lowest first, with the parts it may import besides itself.
LAYERS = {
    "emulator": set(),
    "base": {"emulator"},  # errors, private files, logging, text tables; request.py builds the model's Call
    "trace": {"base"},
    "shaping": {"base", "emulator"},
    "faults": {"base", "emulator"},  # fault rules and the injector's state: pure, asked by the server
    "server": {"base", "emulator", "shaping", "trace", "faults"},
    "capture": {"base", "trace"},  # fusetrace capture: bpftrace's records into a trace, no server
    "report": {"base", "trace"},
    "rehearse": {"base", "emulator", "shaping", "trace", "report"},  # export, replay, fit, compare, simulate
    "client": {"base", "server", "trace"},  # another process asking a server: client.py, the pytest plugin
    "scenarios": {"base", "emulator", "shaping", "server", "trace", "report", "faults"},
    "cli": {
        *("base", "emulator", "shaping", "server", "trace", "report", "rehearse", "scenarios", "faults", "client"),
        "capture",
    },
}
# What the pure model must never reach for: the loop, the kernel, threads, processes, the clock.
IMPURE = {"trio", "pyfuse3", "ctypes", "socket", "subprocess", "threading", "time", "os", "select", "signal", "redis"}


def _part(module: str) -> str:
    """The layer of a fusetrace module name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "base"
    second = parts[1]
    if second in ("emulator", "trace", "shaping", "server", "scenarios", "rehearse", "faults", "capture"):
        return second
    if second in ("client", "pytest_plugin"):
        return "client"
    if second in ("cli", "__main__", "fault_cli", "mount_cli", "umount_cli"):
        return "cli"
    if second in ("report", "stats_view"):
        return "report"
    return "base"


def _modules() -> list[tuple[str, Path]]:
    """(installed module name, file) for every module of the package."""
    out = []
    for folder, package in (
        (REPO / "fusetrace", "fusetrace"),
        (REPO / "emulator", "fusetrace.emulator"),
        (REPO / "scenarios", "fusetrace.scenarios"),
    ):
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            names = [n for n in rel.parts if n != "__init__"]
            out.append((".".join([package, *names]), path))
    return out


def _imports(module: str, path: Path) -> set[str]:
    """The absolute names a module imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from . import x`
    return found


MODULES = _modules()


@pytest.mark.parametrize("module, path", MODULES, ids=[m for m, _ in MODULES])
def test_imports_go_down(module, path):
    mine = _part(module)
    allowed = LAYERS[mine] | {mine}
    for name in _imports(module, path):
        if name.split(".")[0] != "fusetrace" or name in ("fusetrace", "fusetrace.__version__"):
            continue
        target = _known(name)
        if target is not None:
            assert _part(target) in allowed, f"{module} ({mine}) imports {name} ({_part(target)})"


def _known(name: str) -> str | None:
    """The module `name` refers to (a module, or a name inside one), or None."""
    modules = {m for m, _ in MODULES}
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@pytest.mark.parametrize(
    "module, path",
    [(m, p) for m, p in MODULES if _part(m) == "emulator"],
    ids=[m for m, _ in MODULES if _part(m) == "emulator"],
)
def test_the_model_is_pure(module, path):
    reached = {name.split(".")[0] for name in _imports(module, path)} & IMPURE
    assert not reached, f"{module} imports {sorted(reached)}"
