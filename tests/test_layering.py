"""Data flows one way: nothing in tensorgym/ imports the agents or baselines, except the CLI; the
leaderboard (tensorgym/leaderboard/) reaches them only through the registry, and nothing in the
core imports the leaderboard, except the CLI."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEADERBOARD = ROOT / "tensorgym" / "leaderboard"


def imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at any depth (relative imports resolved to full names)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
                # ``from . import x``: x may be a module of the package
                out += [module] + [f"{module}.{a.name}" for a in node.names]
            elif node.module:
                out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def offenders(paths, banned: tuple[str, ...]) -> list[str]:
    return [f"{p.relative_to(ROOT)}: {n}" for p in paths for n in imports(p)
            if n in banned or n.startswith(tuple(b + "." for b in banned))]


def test_core_never_imports_agents_or_baselines():
    offenders = []
    for path in (ROOT / "tensorgym").rglob("*.py"):
        if path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in ("agents", "baselines") or \
                        n.startswith(("tensorgym.agents", "tensorgym.baselines")):
                    offenders.append(f"{path.relative_to(ROOT)}: {n}")
    assert not offenders, offenders


def test_processes_import_nothing_above_them():
    """processes/ is the floor that features, agents and measurement start processes from: it
    imports no other part of tensorgym (errors, which imports nothing, aside)."""
    offenders = []
    for path in (ROOT / "tensorgym" / "processes").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 1:  # from .x: within processes
                    continue
                names = [".".join(filter(None, ("tensorgym" if node.level else None,
                                                node.module)))]
            for n in names:
                if n.startswith("tensorgym") and not n.startswith(
                        ("tensorgym.processes", "tensorgym.errors")):
                    offenders.append(f"{path.relative_to(ROOT)}: {n}")
    assert not offenders, offenders


def test_core_never_imports_the_leaderboard():
    core = [p for p in (ROOT / "tensorgym").rglob("*.py")
            if LEADERBOARD not in p.parents
            and p.relative_to(ROOT).as_posix() not in ("tensorgym/cli.py", "tensorgym/__main__.py")]
    assert len(core) > 20  # the walk found the core
    bad = offenders(core, ("tensorgym.leaderboard",))
    assert not bad, bad


def test_the_leaderboard_reaches_agents_and_baselines_only_through_the_registry():
    paths = list(LEADERBOARD.rglob("*.py"))
    assert len(paths) > 10
    bad = offenders(paths, ("agents", "baselines", "tensorgym.agents", "tensorgym.baselines"))
    assert not bad, bad


def test_imports_sees_relative_and_nested_imports():
    # the checks above are only as good as this parser
    assert "tensorgym.leaderboard.results" in imports(LEADERBOARD / "tables.py")  # from .results
    assert "tensorgym.leaderboard.run" in imports(LEADERBOARD / "replay_track.py")  # in a function
    assert "tensorgym.registry" in imports(LEADERBOARD / "run.py")  # from tensorgym import registry


#: tensorgym's floors, lowest first: a module imports only from its own floor or the ones below.
#: A name stands for a module or a package (the longest that matches a module's name counts).
#: measure sits above lower: its builder processes lower each config, in parallel with the other
#: builds, so the programs it times need not travel back to the caller and out again.
FLOORS = (
    ("tensorgym.errors",),
    ("tensorgym.te", "tensorgym.loopast", "tensorgym.space", "tensorgym.meter",
     "tensorgym.registry", "tensorgym.processes"),
    ("tensorgym.workloads", "tensorgym.codegen"),
    ("tensorgym.hardware", "tensorgym.task"),
    ("tensorgym.templates",),
    ("tensorgym.lower",),
    ("tensorgym.features", "tensorgym.measure"),
    ("tensorgym.records",),
    ("tensorgym.dataset.data", "tensorgym.dataset.cache",
     "tensorgym.dataset.world"),  # world: the replay's model of misses (its cli sits above)
    ("tensorgym.dataset.replay",),
    ("tensorgym.session",),
    ("tensorgym.envs",),
    ("tensorgym.search", "tensorgym.nn"),  # nn: workloads and errors only, torch optional
    ("tensorgym.dataset", "tensorgym.dataset.world.cli", "tensorgym.dataset.world.evaluate"),
    # collection and the command lines: tunes, on sessions
    ("tensorgym.leaderboard",),
    ("tensorgym", "tensorgym.cli", "tensorgym.__main__"),
)


def floor_of(module: str) -> "int | None":
    best, floor = "", None
    for i, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, floor = name, i
    return floor


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").exists()


def tensorgym_imports(path: Path) -> set[str]:
    """The tensorgym modules ``path`` imports, at any depth: ``from X import y`` names ``X.y``
    where that is a module of the tree, else ``X`` (``y`` is defined in ``X``)."""
    package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                out.add(f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base)
    return {n for n in out if n == "tensorgym" or n.startswith("tensorgym.")}


def test_every_module_has_a_floor():
    missing = [module_of(p) for p in (ROOT / "tensorgym").rglob("*.py")
               if floor_of(module_of(p)) is None]
    assert not missing, missing


def test_no_module_imports_from_a_floor_above_its_own():
    upward = []
    for path in (ROOT / "tensorgym").rglob("*.py"):
        me = module_of(path)
        for name in tensorgym_imports(path):
            if floor_of(name) > floor_of(me):
                upward.append(f"{me} (floor {floor_of(me)}) imports {name} "
                              f"(floor {floor_of(name)})")
    assert not upward, "\n".join(sorted(upward))


def test_the_floors_catch_an_upward_import():
    # the check above is only as good as the floors and the parser
    assert floor_of("tensorgym.measure.local") > floor_of("tensorgym.lower")
    assert floor_of("tensorgym.dataset.collection") > floor_of("tensorgym.search") > \
        floor_of("tensorgym.dataset.replay")
    assert "tensorgym.session" in tensorgym_imports(ROOT / "tensorgym" / "envs" / "tensor_sched.py")
