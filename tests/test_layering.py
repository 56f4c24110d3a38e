"""The packages form layers: optima_envs at the bottom, optima_agents above it, optima_train on
top. A lower package never imports a higher one, at module level or inside a function, so each
layer can be used (and tested) without the ones above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("optima_envs", "optima_agents", "optima_train")


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


def test_the_check_sees_function_local_and_relative_imports():
    source = "def f():\n    from optima_train.rewards import RewardWeights\n\nfrom ..train import x\n"
    found = imported_modules(ast.parse(source), "optima_agents.mcts.reward")
    assert sorted(found) == [(2, "optima_train.rewards"), (4, "optima_agents.train")]
