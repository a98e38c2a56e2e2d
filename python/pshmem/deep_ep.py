"""DeepEP V1's package, on pshmem: the names a DeepEP program imports from ``deep_ep``.

A program changes one import::

    import pshmem.deep_ep as deep_ep        # was: import deep_ep

or runs unmodified once a ``deep_ep`` package that re-exports this module is installed::

    python -m pshmem.deep_ep install        # into this interpreter's site-packages
    python -m pshmem.deep_ep install --target DIR
    python -m pshmem.deep_ep uninstall [--target DIR]

The installed package is one file, marked as ours; installing over a ``deep_ep`` that is not
(DeepEP itself) is refused, and so is removing one. What behaves differently from DeepEP, and
what is not provided, is listed in ``pshmem.ep``'s documentation.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import sysconfig

import torch

from pshmem.ep import Buffer, Config, EventOverlap

#: The dtype of top-k expert indices (DeepEP's default build: 64-bit).
topk_idx_t = torch.int64

__all__ = ["Buffer", "Config", "EventOverlap", "topk_idx_t"]

_MARK = "# deep_ep, re-exported from pshmem.deep_ep (made by `python -m pshmem.deep_ep install`)"
_BODY = f"""{_MARK}
from pshmem.deep_ep import *  # noqa: F401,F403
from pshmem.deep_ep import __all__  # noqa: F401
"""


def _ours(pkg: pathlib.Path) -> bool:
    init = pkg / "__init__.py"
    try:
        first = init.read_text().splitlines()[:1]
    except OSError:
        return False
    return first == [_MARK] and sorted(p.name for p in pkg.iterdir()
                                       if p.name != "__pycache__") == ["__init__.py"]


def install(target: pathlib.Path) -> pathlib.Path:
    """Writes the ``deep_ep`` package into ``target`` (again if it is ours); refuses to
    replace any other ``deep_ep``. Returns the package's folder."""
    pkg = target / "deep_ep"
    if pkg.exists() and not _ours(pkg):
        raise FileExistsError(f"{pkg} is a deep_ep package not made by pshmem (DeepEP "
                              f"itself?): uninstall it first, or install into another --target")
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(_BODY)
    return pkg


def uninstall(target: pathlib.Path) -> bool:
    """Removes the ``deep_ep`` package from ``target`` if it is ours; False if there was none.
    Refuses to remove any other."""
    pkg = target / "deep_ep"
    if not pkg.exists():
        return False
    if not _ours(pkg):
        raise FileExistsError(f"{pkg} is a deep_ep package not made by pshmem: left as it is")
    shutil.rmtree(pkg)
    return True


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pshmem.deep_ep",
                                description="Install or remove the deep_ep package that "
                                            "re-exports pshmem.deep_ep.")
    p.add_argument("action", choices=["install", "uninstall"])
    p.add_argument("--target", type=pathlib.Path,
                   default=pathlib.Path(sysconfig.get_paths()["purelib"]),
                   help="folder on the import path (default: this interpreter's site-packages)")
    a = p.parse_args(argv)
    try:
        if a.action == "install":
            print(f"installed {install(a.target)}")
        else:
            print(f"removed {a.target / 'deep_ep'}" if uninstall(a.target)
                  else f"no deep_ep package in {a.target}")
    except OSError as e:
        print(f"pshmem.deep_ep: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
