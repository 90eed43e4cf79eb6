"""fuserc: a compiler and runtime for tensor programs sharded over many GPUs."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

__version__ = "0.1.0"

SUBPACKAGES = ("dialects", "passes", "runtime")
"""Installed, these are folders of the package (`fuserc.runtime`, ...); in
the repository they are top-level folders beside `fuserc/` (setuptools'
package-dir in pyproject.toml)."""


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds `fuserc.dialects`, `fuserc.passes` and `fuserc.runtime` in the
    repository's top-level folders, when `fuserc` itself was imported from a
    checkout: `python -m fuserc` or `torchrun -m fuserc` run from the
    repository's folder (which puts the folder first on sys.path), or the
    folder on PYTHONPATH. First on sys.meta_path, so that a checkout is never
    mixed with another installed copy of fuserc."""

    def __init__(self, root: str):
        self.root = root
        self.folders = {f"{__name__}.{sub}": os.path.join(root, sub) for sub in SUBPACKAGES}

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )


def _find_checkout_subpackages() -> None:
    """Installs `_CheckoutFinder` when this package is the repository's
    `fuserc/` folder (its subpackages are not inside it but beside it);
    nothing for an installed package."""
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(os.path.join(here, SUBPACKAGES[-1])):
        return  # installed: the subpackages are folders of this one
    root = os.path.dirname(here)
    if not all(os.path.isfile(os.path.join(root, sub, "__init__.py")) for sub in SUBPACKAGES):
        return
    if not any(isinstance(f, _CheckoutFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder(root))


_find_checkout_subpackages()
