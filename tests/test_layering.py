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
