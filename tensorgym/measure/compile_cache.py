"""Compiled kernels by the hash of their source: distinct configs often lower to the same code,
and a tune revisits programs, so no source is compiled twice on one machine.

A binary is keyed by the SHA-256 of the generated source and of what else decides the compiler's
output (target, device, compiler version); kept in memory and on disk under the user cache dir,
written atomically (a killed process leaves no half file), pruned to the newest ``max_files``.
"""
from __future__ import annotations

import hashlib
import os
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

import platformdirs


def default_dir() -> Path:
    return Path(platformdirs.user_cache_dir("tensorgym")) / "compiled"


def source_key(fingerprint: str, source: str) -> str:
    return hashlib.sha256(f"{fingerprint}\0{source}".encode()).hexdigest()


class CompileCache:
    def __init__(self, directory: "str | os.PathLike | None" = None, memory: int = 256,
                 max_files: int = 20_000) -> None:
        self.dir = Path(directory) if directory else default_dir()
        self.memory = memory
        self.max_files = max_files
        self._mem: "OrderedDict[str, Any]" = OrderedDict()
        self._writes = 0

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.bin"

    def get(self, key: str) -> Optional[Any]:
        if key in self._mem:
            self._mem.move_to_end(key)
            return self._mem[key]
        try:
            binary = pickle.loads(self._path(key).read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, ValueError):
            return None  # absent, or unreadable: compile again
        self._remember(key, binary)
        return binary

    def put(self, key: str, binary: Any) -> None:
        self._remember(key, binary)
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(binary, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, path)
        except OSError:
            return  # a cache that cannot write only costs time
        self._writes += 1
        if self._writes % 200 == 0:
            self.prune()

    def _remember(self, key: str, binary: Any) -> None:
        self._mem[key] = binary
        while len(self._mem) > self.memory:
            self._mem.popitem(last=False)

    def prune(self) -> None:
        """Delete the oldest files beyond ``max_files``."""
        files = []
        for path in self.dir.glob("*/*.bin"):
            try:
                files.append((path.stat().st_mtime, path))
            except OSError:
                pass
        files.sort(reverse=True)
        for _, path in files[self.max_files:]:
            try:
                path.unlink()
            except OSError:
                pass
