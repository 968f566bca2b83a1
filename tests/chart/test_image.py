"""The image's build context: what the Dockerfile copies is enough to run both deployables, and no more.

No container builder runs here, so the test rebuilds the image's source tree by hand: exactly the
directories the Dockerfile's build stage COPYs (and .dockerignore lets through), in a temporary
directory, and imports every module of them in a fresh interpreter that cannot see the checkout.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from tests.support.paths import REPO

DOCKERFILE = REPO / "Dockerfile"


def _copied_dirs() -> list[str]:
    build_stage = DOCKERFILE.read_text().split("\nFROM ", 2)[1]  # the first stage after the first FROM line
    dirs = re.findall(r"^COPY (?!--)(\w+)/ \1/$", build_stage, flags=re.M)
    assert dirs, "no COPY <pkg>/ <pkg>/ lines found in the build stage"
    return dirs


def _dockerignore_allows(name: str) -> bool:
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    return f"!{name}/" in lines


def test_every_package_the_image_needs_is_copied_and_not_ignored(tmp_path: Path) -> None:
    dirs = _copied_dirs()
    assert "simulator" not in dirs  # the demo/simulator (extra `sim`) stays out of the image
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages - {"simulator"} == set(dirs), "the image must carry every distributed package but the simulator"
    for d in dirs:
        assert _dockerignore_allows(d), f".dockerignore drops {d}/ although the Dockerfile copies it"
        shutil.copytree(REPO / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__", "tests", "generated"))
    probe = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        repo = {str(REPO)!r}
        # forget the editable install of the checkout: only the copied tree may be imported
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")
                            and "editable" not in getattr(f, "__name__", "")]
        sys.path[:] = [p for p in sys.path if p and p != repo and not (p.startswith(repo + "/") and "/.venv/" not in p)]
        sys.path.insert(0, {str(tmp_path)!r})
        failed = []
        for top in {dirs!r}:
            pkg = importlib.import_module(top)
            assert pkg.__file__.startswith({str(tmp_path)!r}), pkg.__file__
            for info in pkgutil.walk_packages(pkg.__path__, top + "."):
                if info.name.endswith(".__main__"):  # runs the CLI on import
                    continue
                try:
                    importlib.import_module(info.name)
                except Exception as exc:
                    failed.append(f"{{info.name}}: {{type(exc).__name__}}: {{exc}}")
        from queuepilot.cli import SUBCOMMANDS
        for sub in ("exporter", "controller"):
            importlib.import_module(SUBCOMMANDS[sub][0])
        heavy = sorted(m for m in ("numpy", "matplotlib", "simulator", "ray") if m in sys.modules)
        print("FAILED", failed)
        print("HEAVY", heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "FAILED []" in out.stdout, out.stdout
    assert "HEAVY []" in out.stdout, out.stdout
