"""The packages form layers: optima_envs at the bottom, optima_agents above it, then optima_eval
(the held-out set, the systems, evaluation and the leaderboard), optima_train on top. A lower
package never imports a higher one, at module level or inside a function, so each layer can be
used (and tested) without the ones above it.

Within the packages no two modules import each other when they are imported: such a pair only
loads in one order, and whichever is imported second finds the first half-initialised. An import
inside a function, or under `if TYPE_CHECKING:`, runs after both are loaded and is not counted.

No module of the packages imports pytest when it is imported, the test support they ship
included (`optima_envs.test`, `optima_agents.testing`, ...): benchmarks and users' scripts import
it without a test runner."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("optima_envs", "optima_agents", "optima_eval", "optima_train")


def imported_modules(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, module) of every import in `tree`, relative imports resolved against `module`."""
    found = []
    package = module.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def higher_imports(package: str) -> list[str]:
    forbidden = LAYERS[LAYERS.index(package) + 1:]
    problems = []
    for path in sorted((ROOT / package).rglob("*.py")):
        relative = path.relative_to(ROOT)
        module = ".".join(relative.with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in imported_modules(tree, module):
            if name.split(".")[0] in forbidden:
                problems.append(f"{relative}:{line} imports {name}")
    return problems


@pytest.mark.parametrize("package", LAYERS[:-1])
def test_no_package_imports_a_higher_one(package):
    assert higher_imports(package) == []


class _AtImport(ast.NodeTransformer):
    """Keeps only the statements that run when the module is imported: function bodies and
    `if TYPE_CHECKING:` blocks are dropped (class bodies and other branches stay)."""

    def visit_FunctionDef(self, node: ast.AST) -> None:
        return None

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> ast.AST:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
        return self.generic_visit(node)


def import_time_edges(tree: ast.AST, module: str, known: set[str]) -> set[str]:
    """The modules of `known` that `tree` (the source of `module`) imports when it is imported;
    `from package import sub` imports the module `package.sub` when there is one."""
    edges = set()
    for node in ast.walk(_AtImport().visit(tree)):
        if isinstance(node, ast.ImportFrom):
            [(_, base)] = imported_modules(node, module)
            edges |= {name if name in known else base for name in (f"{base}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            edges |= {name for _, name in imported_modules(node, module)}
    return edges & known


def mutual_imports() -> list[str]:
    files = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (path, ".".join(parts))
    known = set(files)
    graph = {name: import_time_edges(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), module, known)
             for name, (path, module) in files.items()}
    return sorted(f"{a} <-> {b}" for a, edges in graph.items() for b in edges if a < b and a in graph[b])


def test_no_two_modules_import_each_other():
    assert mutual_imports() == []


def pytest_at_import() -> list[str]:
    """Every module of the packages whose import-time statements import pytest."""
    problems = []
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = _AtImport().visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            problems += [f"{path.relative_to(ROOT)}:{line}" for line, name in imported_modules(tree, module)
                         if name.split(".")[0] in ("pytest", "_pytest")]
    return problems


def test_no_module_imports_pytest_when_imported():
    assert pytest_at_import() == []


#: The test support the packages ship, for benchmarks and for users' own tests.
SHIPPED_SUPPORT = ("optima_envs.test", "optima_envs.test.math_cases", "optima_agents.testing",
                   "optima_agents.models.testing", "optima_train.buffers.testing")


def test_the_shipped_test_support_loads_no_pytest():
    """What they import in turn counts too (PettingZoo's test package imports pytest when it can)."""
    code = (f"import sys\nfor name in {SHIPPED_SUPPORT!r}:\n    __import__(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_cycle_check_sees_what_runs_at_import():
    source = ("from typing import TYPE_CHECKING\nfrom . import sub, name\nfrom .other import x\n"
              "if TYPE_CHECKING:\n    from pkg.typed import T\n"
              "def f():\n    import pkg.late\n")
    known = {"pkg", "pkg.sub", "pkg.other", "pkg.typed", "pkg.late"}
    assert import_time_edges(ast.parse(source), "pkg.mod", known) == {"pkg", "pkg.sub", "pkg.other"}


def test_the_check_sees_function_local_and_relative_imports():
    source = "def f():\n    from optima_train.rewards import RewardWeights\n\nfrom ..train import x\n"
    found = imported_modules(ast.parse(source), "optima_agents.mcts.reward")
    assert sorted(found) == [(2, "optima_train.rewards"), (4, "optima_agents.train")]
