"""The fake NVML library for the nvml source's tests: compiled once per session, injected per test.

``fake_nvml.c`` is compiled with gcc into a session tmp dir three times, each file named
``libnvidia-ml.so.1``: ``current/`` and ``old-driver/`` (``-DOLD_DRIVER``: some symbols not
exported) are loaded in-process into the *real* pynvml with ``pynvml.nvmlLib = ctypes.CDLL(path)``
(no LD_LIBRARY_PATH needed); ``ld-path/`` is found by the dynamic loader through ``LD_LIBRARY_PATH`` in
subprocess tests.  Only ``ld-path/`` carries the real ``DT_SONAME`` libnvidia-ml.so.1: glibc
resolves a later ``dlopen("libnvidia-ml.so.1")`` to any already-mapped object with that soname,
so an in-process fake with it would leak into every later pynvml user of the test process.  The
teardown of the fixtures (conftest.py) puts pynvml back as it was at import (``nvmlLib = None``, empty function-pointer
cache, refcount 0).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pynvml

FAKE_SRC = Path(__file__).with_name("fake_nvml.c")
SONAME = "libnvidia-ml.so.1"
IN_PROCESS_SONAME = "libqueuepilot-fake-nvml.so"  # never what pynvml dlopens by name


@dataclass(frozen=True)
class FakeLibs:
    current: Path  # in-process builds
    old_driver: Path
    ld_path: Path  # real soname, for LD_LIBRARY_PATH in subprocesses


def compile_fake(out: Path, *defines: str, soname: str = IN_PROCESS_SONAME) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is required to build the fake NVML library: run 'make apt'")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *defines, f"-Wl,-soname,{soname}"]
    subprocess.run(
        [*cmd, "-o", str(out), str(FAKE_SRC), "-lpthread"], check=True, capture_output=True, text=True
    )
    return out


def reset_pynvml() -> None:
    """Put pynvml's module state back as it is right after import."""
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0


class FakeNvml:
    """One test's fake: its control file and the loaded library."""

    def __init__(self, libs: FakeLibs, control: Path) -> None:
        self.libs = libs
        self.control = control
        self.lib: ctypes.CDLL | None = None

    def write(self, text: str) -> None:
        """Replace the control file atomically (a new inode: the fake re-reads it on its next call)."""
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.control)

    def load(self, variant: str = "current") -> ctypes.CDLL:
        path = self.libs.current if variant == "current" else self.libs.old_driver
        lib = ctypes.CDLL(str(path))
        lib.fake_nvml_call_count.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.fake_nvml_call_count.restype = ctypes.c_ulong
        lib.fake_nvml_gpm_samples_live.restype = ctypes.c_int
        lib.fake_nvml_reset_counts()
        reset_pynvml()
        pynvml.nvmlLib = lib
        self.lib = lib
        return lib

    def gpm_samples_live(self) -> int:
        """GPM samples allocated and not freed."""
        assert self.lib is not None
        return int(self.lib.fake_nvml_gpm_samples_live())

    def calls(self, symbol: str, gpu: int = -1) -> int:
        """How many times the source called ``symbol`` (on GPU ``gpu``; -1: all)."""
        assert self.lib is not None
        return int(self.lib.fake_nvml_call_count(symbol.encode(), gpu))
