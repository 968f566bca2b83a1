"""Tests share helpers through modules, never through each other: no file under tests/ imports a test
module (``test_*.py``) or a ``conftest.py`` (pytest loads those itself; importing one runs it twice
under two names and couples tests to each other's fixtures)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

TESTS = REPO / "tests"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def shared_through_a_test(module: str) -> bool:
    top, *rest = module.split(".")
    return top == "tests" and any(part == "conftest" or part.startswith("test_") for part in rest)


def test_no_file_imports_a_test_module_or_a_conftest() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100  # the walk found the tree
    offenders = [f"{path.relative_to(REPO)}:{line}: {module}"
                 for path in files for line, module in imported_modules(path) if shared_through_a_test(module)]
    assert offenders == []


def test_the_check_sees_both_kinds_of_import() -> None:
    assert shared_through_a_test("tests.controller.conftest")
    assert shared_through_a_test("tests.security.test_ray_credentials")
    assert shared_through_a_test("tests.decisions.test_scenarios.until")  # from module import name
    assert not shared_through_a_test("tests.decisions.scenarios")
    assert not shared_through_a_test("tests.support.eventually")
