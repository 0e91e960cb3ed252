"""Atomic file replacement, the one way the project writes a file that readers may open at
any moment (the store's Arrow files, the ledger's Parquet files, the online calibration state).

The content goes to a hidden temporary file beside the target, is fsynced, then
``os.replace``-d over the target, and the folder is fsynced: a reader sees the old file or
the new one, never a partial one, and a crash leaves at most a ``.<name>.*.tmp`` file.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync a folder, so that a rename inside it survives a crash (a no-op where folders
    cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def replace_atomically(path: Path, write: Callable[[Path], None], *, fsync: bool = True) -> None:
    """Make ``path`` hold what ``write(tmp)`` writes to a temporary file, atomically.

    ``fsync=False`` skips both fsyncs (bulk writers that sync once at the end). Any error
    removes the temporary file and propagates unchanged."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        fsync_dir(path.parent)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """``data`` as the whole content of ``path``, atomically (``replace_atomically``)."""

    def write(tmp: Path) -> None:
        tmp.write_bytes(data)

    replace_atomically(Path(path), write)
