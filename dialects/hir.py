"""The hir dialect: host programs (see docs/hir.md)."""

from xdsl.ir import Dialect

Hir = Dialect("hir", [], [])
