"""What replay keeps beside a dataset: feature rows of its recorded configs and fitted surrogate
models, in ``<dataset>.cache/`` (or, where that cannot be written, the user cache dir, with a
warning). Every file name carries the dataset's digest and a hash of the code that computes
features, so a cache never outlives the data or the code it was made from."""
from __future__ import annotations

import hashlib
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np
import platformdirs

# the modules whose code decides a config's features (loop AST and its analysis)
_FEATURE_CODE = ("features", "lower", "templates", "loopast.py", "te.py", "space.py",
                 "workloads.py")


@lru_cache(maxsize=1)
def feature_code_hash() -> str:
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for name in _FEATURE_CODE:
        p = root / name
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class CacheDir:
    """Files beside the dataset at ``dataset_path`` (``dataset_path + ".cache"``), or in
    ``root`` if given; a dataset held in memory only caches in the user cache dir."""

    def __init__(self, dataset_path: str, digest: str, root: Optional[str] = None) -> None:
        self.digest = digest
        self.fallback = Path(platformdirs.user_cache_dir("tensorgym")) / "datasets" / digest[:16]
        self.dir = Path(root) if root else (Path(dataset_path + ".cache") if dataset_path
                                            else self.fallback)

    def path(self, name: str) -> Path:
        return self.dir / f"{self.digest[:12]}-{name}"

    def write(self, name: str, save) -> Path:
        """``save(path)`` writes the file (to a temporary name, then renamed: readers never see
        half a file); beside the dataset if possible, else in the user cache dir."""
        for d in dict.fromkeys((self.dir, self.fallback)):
            target = d / f"{self.digest[:12]}-{name}"
            tmp = target.with_name(target.name + f".tmp{id(save)}")
            try:
                d.mkdir(parents=True, exist_ok=True)
                save(tmp)
                tmp.replace(target)
                if d != self.dir:
                    warnings.warn(f"cannot write beside the dataset ({self.dir}); cached in {d}",
                                  stacklevel=3)
                    self.dir = d
                return target
            except OSError:
                continue
        raise OSError(f"cannot write the replay cache {name} in {self.dir} nor {self.fallback}")

    def find(self, name: str) -> Optional[Path]:
        for d in dict.fromkeys((self.dir, self.fallback)):
            p = d / f"{self.digest[:12]}-{name}"
            if p.is_file():
                return p
        return None


def load_rows(cache: CacheDir, name: str, config_jsons: list[str]) -> Optional[np.ndarray]:
    """Cached feature rows, if the file holds exactly these configs in this order."""
    p = cache.find(name)
    if p is None:
        return None
    try:
        with np.load(p, allow_pickle=False) as z:
            if list(z["configs"]) != config_jsons:
                return None
            return np.asarray(z["rows"], dtype=np.float32)
    except (OSError, ValueError, KeyError):
        return None  # a damaged cache file: computed again and rewritten


def save_rows(cache: CacheDir, name: str, config_jsons: list[str], rows: np.ndarray) -> None:
    def save(path: Path) -> None:
        with open(path, "wb") as f:
            np.savez(f, configs=np.array(config_jsons), rows=rows)

    try:
        cache.write(name, save)
    except OSError as e:
        warnings.warn(f"replay: feature rows not cached ({e}); they are computed again next time",
                      stacklevel=2)
