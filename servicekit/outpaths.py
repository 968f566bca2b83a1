"""Checking, before any work starts, that an output file or folder a command was given can be written,
with a message that names the path the user gave and what is wrong with it."""

from __future__ import annotations

import tempfile
from pathlib import Path


def _first_existing(path: Path) -> Path:
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path("/")


def _why(err: OSError) -> str:
    return err.strerror or str(err)


def check_writable(path: Path, *, directory: bool) -> None:
    """Create ``path`` (``directory``) or its parent folder and write a probe file there; ValueError (one
    line naming ``path``) when that cannot be done: a parent that is a file, no permission, a read-only or
    virtual file system, or a file path that is a folder."""
    where = path if directory else path.parent
    what = f"{'folder' if directory else 'file'} {path}"
    blocker = _first_existing(where)
    if not blocker.is_dir():
        raise ValueError(f"cannot write {what}: {blocker} is not a folder")
    if not directory and path.is_dir():
        raise ValueError(f"cannot write {what}: it is a folder")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot write {what}: cannot create {e.filename or where}: {_why(e)}") from None
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".queuepilot-probe-"):
            pass
    except OSError as e:
        raise ValueError(f"cannot write {what}: {where} is not writable: {_why(e)}") from None
