"""The simulator the policy benchmarks run, compiled with mypyc: the same sources, built to C extensions.

The benchmarks run the controller's own decision path over a month of trace, 154 times (`make bench`);
in CPython the interpreter's overhead is most of that time.  mypyc (part of mypy, already a dev
dependency) compiles type-annotated modules to C extensions without changing what they do; this
module builds a copy of the project's packages with the hot modules (``MODULES``) compiled, into a
folder of its own (``.build/compiled``), and lets a benchmark run on that copy:

    python benchmarks/compiled.py build                 # make compiled
    QUEUEPILOT_COMPILED=.build/compiled python benchmarks/policy.py ...

The checkout itself is never touched (tests, the demo and the controller import the sources).  The
build records a hash of every source it copied; a benchmark told to use it (``select_build``)
refuses a build made from other sources than the checkout's, so a stale build never measures code
that is not there.  Whether a build decides exactly as the sources do is tested
(tests/simulate/test_compiled_build.py: the same summaries, run for run) and shown again by every
matrix merged with an interpreted one (``policy.py --merge`` refuses a run whose numbers differ).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Mapping, Sequence
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / ".build" / "compiled"
ENV = "QUEUEPILOT_COMPILED"
STAMP = "compiled.json"
# the project's packages, copied whole (a compiled module imports the rest as they are)
PACKAGES = ("queuepilot", "servicekit", "exporter", "autoscaler", "simulator", "report", "dashboards", "alerts")
# where a simulated month's time goes (benchmarks/results/pass_profile.md): the engine and its
# ledger, the simulated cluster, Kueue and KubeRay, and the pure policies the reconcilers call.
# Left out: the records other modules build and read most (autoscaler/core/snapshot.py: native
# classes read from interpreted code were slower), the queue-pressure index (a Sequence subclass
# whose metaclass mypyc cannot combine with the records'), and the async reconcilers (an
# interpreted reconciler cannot inherit from a compiled one, and compiling them all gained nothing)
MODULES = (
    "simulator/utilization.py", "simulator/workload.py", "simulator/ray.py", "simulator/engine.py",
    "simulator/cluster.py", "simulator/kueue.py", "simulator/metrics.py", "simulator/snapshot.py",
    "simulator/baselines.py",
    "autoscaler/core/policy/scaling.py", "autoscaler/core/policy/stall.py", "autoscaler/core/policy/behavior.py",
    "autoscaler/core/policy/packing.py", "autoscaler/core/policy/admission.py", "autoscaler/core/policy/ledger.py",
    "autoscaler/core/policy/quota.py",
)
# mypyc type-checks what it compiles; third-party packages without stubs are taken as Any
MYPY_INI = "[mypy]\npython_version = 3.11\nignore_missing_imports = True\n"


class StaleBuild(RuntimeError):
    """A compiled build that was not made from this checkout's sources (or for this Python)."""


_NOT_SOURCES = ("__pycache__", "*.so", "*.pyc")  # what the copy leaves out and the hash does not read


def source_hash(root: Path) -> str:
    """sha256 over every file of ``PACKAGES`` under ``root`` (its path and bytes, the package data with
    the modules; build products left out), in path order."""
    h = hashlib.sha256()
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*")):
            if not path.is_file() or any(fnmatch(part, pat) for part in path.parts for pat in _NOT_SOURCES):
                continue
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _python() -> str:
    return f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}"


def build(out: Path, modules: Sequence[str] = MODULES, *, quiet: bool = False) -> dict[str, object]:
    """Copy the packages into ``out`` (emptied first) and compile ``modules`` there; returns the stamp."""
    from mypy.version import __version__ as mypy_version

    t0 = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, out / pkg, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    (out / "mypy.ini").write_text(MYPY_INI)
    log = out / "build.log"
    with log.open("w") as f:
        done = subprocess.run([sys.executable, "-m", "mypyc", *modules], cwd=out, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "MYPY_CACHE_DIR": str(out / ".mypy_cache")}, check=False)
    if done.returncode != 0:
        errors = [line for line in log.read_text().splitlines() if ": error:" in line]
        raise RuntimeError(f"mypyc failed (exit {done.returncode}); {log}:\n" + "\n".join(errors[:20]))
    missing = [m for m in modules if not list((out / m).parent.glob(Path(m).stem + ".*.so"))]
    if missing:
        raise RuntimeError(f"mypyc built no extension for {', '.join(missing)} ({log})")
    stamp: dict[str, object] = {
        "sources": source_hash(ROOT), "modules": list(modules), "mypy": mypy_version, "python": _python(),
        "interpreter": interpreter(),
        "built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "build_s": round(time.perf_counter() - t0, 1),
    }
    if source_hash(out) != stamp["sources"]:  # (the sources moved while it built)
        raise StaleBuild(f"the sources changed during the build of {out}: build again")
    (out / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    if not quiet:
        print(f"compiled {len(modules)} modules with mypyc {mypy_version} into {out} in {stamp['build_s']} s")
    return stamp


def check(path: Path) -> dict[str, object]:
    """The stamp of the build at ``path`` if it was made from this checkout's sources for this Python."""
    try:
        stamp = json.loads((path / STAMP).read_text())
    except (OSError, ValueError) as e:
        raise StaleBuild(f"{ENV}={path}: no compiled build there ({e}); run `make compiled`") from None
    if stamp.get("python") != _python():
        raise StaleBuild(f"{ENV}={path}: built for {stamp.get('python')}, this is {_python()}; run `make compiled`")
    if stamp.get("sources") != source_hash(ROOT):
        raise StaleBuild(f"{ENV}={path}: built from other sources than this checkout's; run `make compiled`")
    return dict(stamp)


_SELECTED: dict[str, dict[str, object]] = {}  # build path -> its stamp, once selected in this process


def select_build(environ: Mapping[str, str] | None = None, *, exit_on_stale: bool = False) -> dict[str, object] | None:
    """Where ``QUEUEPILOT_COMPILED`` names a build: check it (``StaleBuild`` if it does not match the
    checkout; with ``exit_on_stale``, as a benchmark script calls it, the process exits with that
    error instead) and have the project's packages imported from it (a finder ahead of ``sys.path``'s),
    before any project module is imported; its stamp.
    None (and nothing changed) where the variable is unset or empty.  Selecting the same build again
    (another benchmark module imported by the first) changes nothing."""
    env = os.environ if environ is None else environ
    where = env.get(ENV, "").strip()
    if not where:
        return None
    path = Path(where)
    if not path.is_absolute():
        path = ROOT / path
    if str(path) in _SELECTED:
        return _SELECTED[str(path)]
    loaded = [m for m in ("simulator", "autoscaler") if m in sys.modules]
    if loaded:
        raise RuntimeError(f"{ENV}: {', '.join(loaded)} already imported from the sources; select the build first")
    try:
        stamp = check(path)
    except StaleBuild as e:
        if exit_on_stale:
            raise SystemExit(f"error: {e}") from None
        raise
    # the project's packages are found in the build whatever comes first on sys.path later (a benchmark
    # module puts the checkout there again when it is imported): a finder ahead of the path's
    sys.meta_path.insert(0, _BuildFinder(path))
    _SELECTED[str(path)] = stamp
    return stamp


class _BuildFinder(importlib.abc.MetaPathFinder):
    """Finds the project's top-level packages (``PACKAGES``) and mypyc's shared library in a build
    folder; the packages' modules then come from the package's own folder there, as usual."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if "." in fullname or not (fullname in PACKAGES or fullname.endswith("__mypyc")):
            return None  # (``*__mypyc``: the library mypyc puts the compiled modules' code in)
        return importlib.machinery.PathFinder.find_spec(fullname, [self.path])


def _current(path: Path) -> dict[str, object] | None:
    """The build at ``path`` where it matches the checkout, compiled ``MODULES`` and was built by this
    interpreter (``make compiled`` builds again for the bench venv's); else None."""
    try:
        stamp = check(path)
    except StaleBuild:
        return None
    return stamp if stamp.get("modules") == list(MODULES) and stamp.get("interpreter") == interpreter() else None


def selected() -> dict[str, object] | None:
    """The stamp of the build this process runs on (``select_build``), None where it runs the sources."""
    return next(iter(_SELECTED.values()), None)


def interpreter() -> str:
    """This interpreter, for a page's provenance line: its version and the binary a venv's python is."""
    return f"CPython {platform.python_version()} ({os.path.realpath(sys.executable)})"


def describe(stamp: dict[str, object] | None) -> str:
    """How the runs were executed, for a page's provenance line (the interpreter matters as much as the
    build: the same code ran some 20 % faster on Debian's python3.11 than on pyenv's, Makefile ``BENCH_PYTHON``)."""
    if stamp is None:
        return f"{interpreter()}, interpreted"
    modules = stamp.get("modules") or []
    return (f"{interpreter()}, {len(modules)} modules compiled with mypyc {stamp.get('mypy')} "
            f"(benchmarks/compiled.py)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="copy the packages and compile the hot modules (unless up to date)")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT)
    b.add_argument("--force", action="store_true", help="build again even where the build is up to date")
    c = sub.add_parser("check", help="whether the build matches this checkout")
    c.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build":
            current = _current(args.out) if not args.force else None
            if current is not None:
                print(f"{args.out}: up to date ({describe(current)})")
            else:
                build(args.out)
        else:
            print(describe(check(args.out)))
    except (RuntimeError, StaleBuild) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
