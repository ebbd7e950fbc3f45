"""All-or-nothing outputs: build every file in memory, check every target, then write.

A command collects its outputs in an ``Outputs`` (target path -> bytes) and the stale files
it should remove, then calls ``commit()``: every target is checked first (a folder, device
or FIFO at a target is refused, see ``kvlab.summarize.check_output_path``; every folder is
created and proven writable), every file is written to a temporary name beside its target,
and only when all of them are written are they renamed into place and the stale files
removed. A failure before the renames leaves every output folder as it was.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> outputs = Outputs()
>>> outputs.add(folder / "a.txt", b"hello")
>>> [path.name for path in outputs.commit()]
['a.txt']
>>> (folder / "a.txt").read_bytes()
b'hello'
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
import threading
from pathlib import Path

import polars as pl

from kvlab.summarize import check_output_path
from pipeline.base.errors import CLIError

__all__ = ["Outputs", "parquet_bytes", "json_bytes", "ZSTD_LEVEL"]

#: zstd level of every Parquet file, chosen by measurement: ``python -m pipeline bench``
#: prints the table for the 3.3 M events of ``run --docs 3000`` (polars' writer, 2-core
#: machine, 2026-11-30): level 1 0.58 s / 2.51 MB, level 3 0.77 s / 2.44 MB, level 6
#: 0.84 s / 2.42 MB, level 9 0.92 s / 2.42 MB, level 15 1.25 s / 2.00 MB. Level 3 is within
#: 1 % of level 9's size at less time; pyarrow's writer (used before) took about 1.3 s for
#: 6.9 MB at any level. Polars' writer keeps the Enum columns.
ZSTD_LEVEL = 3


def parquet_bytes(frame: pl.DataFrame, level: int = ZSTD_LEVEL,
                  metadata: dict[str, str] | None = None) -> bytes:
    """``frame`` as a zstd Parquet file, in memory (polars' writer); ``metadata``: the
    file's key-value metadata (``polars.read_parquet_metadata`` reads it back)."""
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="zstd", compression_level=level, metadata=metadata)
    return buffer.getvalue()


def json_bytes(document: object) -> bytes:
    """``document`` exactly as ``kvlab.summarize.write_json_atomic`` writes it."""
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")


def check_target(path: str | os.PathLike, what: str = "output") -> str:
    """The real path a write to ``path`` would replace; CLIError (naming ``what``) when it is
    a folder, device or FIFO, or its folder cannot be created or written. Creates nothing."""
    try:
        real = check_output_path(path)
    except OSError as exc:
        raise CLIError(f"{what} {path}: {exc.strerror}") from None
    folder = Path(real).parent
    while not folder.exists():
        if folder.is_symlink():             # a dangling link: mkdir would fail
            break
        folder = folder.parent
    if not folder.is_dir():
        raise CLIError(f"{what} {path}: cannot write there ({folder} is not a folder)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CLIError(f"{what} {path}: cannot write there ({folder}: permission denied)")
    return real


class Outputs:
    """Files to write (path -> bytes) and stale files to remove, committed together."""

    def __init__(self) -> None:
        self.files: dict[Path, bytes] = {}
        self.stale: list[Path] = []
        self.labels: dict[Path, str] = {}

    def add(self, path: str | os.PathLike, content: bytes, label: str | None = None) -> None:
        """Schedule ``content`` for ``path``; ``label`` names the option in error messages."""
        target = Path(os.path.abspath(path))
        self.files[target] = content
        if label:
            self.labels[target] = label

    def remove(self, path: str | os.PathLike) -> None:
        """Schedule ``path`` for removal (if it exists) when the outputs are committed."""
        self.stale.append(Path(os.path.abspath(path)))

    def check(self) -> dict[Path, str]:
        """Prove every target can be written, creating nothing; CLIError naming the option
        and path if not. Returns target -> the real path to replace (symlinks written
        through)."""
        return {target: check_target(target, self.labels.get(target, "output"))
                for target in self.files}

    def commit(self) -> list[Path]:
        """Check, write every file to a temporary name, rename all, remove stale files.

        A failure or Ctrl-C while the temporary files are written removes them and the
        folders this call created; Ctrl-C during the renames is held until they are all
        done (``committed`` then lists the files, for the CLI's message)."""
        real = self.check()
        staged: list[tuple[str, str]] = []
        created: list[str] = []
        try:
            umask = os.umask(0)
            os.umask(umask)
            for target, content in self.files.items():
                created += _make_folders(os.path.dirname(real[target]))
                fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(real[target]))
                staged.append((tmp, real[target]))
                with os.fdopen(fd, "wb") as handle:
                    os.fchmod(handle.fileno(), 0o666 & ~umask)
                    handle.write(content)
        except BaseException as exc:
            for tmp, _ in staged:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            for folder in reversed(created):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
            if isinstance(exc, OSError):
                raise CLIError(f"{exc.filename or 'output'}: cannot write "
                               f"({exc.strerror or exc})") from None
            raise
        with _sigint_held():
            for tmp, target in staged:
                os.replace(tmp, target)
            for path in self.stale:
                if path not in self.files:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            committed.extend(self.files)
        return list(self.files)


#: Every file committed in this process (the CLI's Ctrl-C message says whether any was).
committed: list[Path] = []


def _make_folders(folder: str) -> list[str]:
    """``os.makedirs(folder)``; the folders it created, outermost first."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in reversed(missing):
        os.makedirs(path, exist_ok=True)
    return list(reversed(missing))


@contextlib.contextmanager
def _sigint_held():
    """Hold SIGINT (Ctrl-C) while the body runs; a pending one is delivered at the end."""
    main = threading.current_thread() is threading.main_thread()
    if main and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if main and hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
