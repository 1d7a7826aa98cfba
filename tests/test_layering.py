"""Data flows one way: nothing in tensorgym/ imports the agents or baselines, except the CLI."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
