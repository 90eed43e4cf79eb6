"""The registry of the fusion dialect's ops: every family's op classes, the
dialect object, and lookup by name (`fusion.add` or `add`)."""

from __future__ import annotations

from xdsl.ir import Dialect

from fuserc.dialects import (
    fusion_contraction, fusion_dispatch, fusion_elementwise, fusion_layout, fusion_moe, fusion_nn, fusion_reduction,
)
from fuserc.dialects.fusion import FusionOp, MeshOp, ShardingAttr

TENSOR_OPS: tuple[type[FusionOp], ...] = (
    *fusion_contraction.OPS,
    *fusion_elementwise.OPS,
    *fusion_reduction.OPS,
    *fusion_layout.OPS,
    *fusion_nn.OPS,
    *fusion_moe.OPS,
    *fusion_dispatch.OPS,
)
"""Every tensor op of the dialect."""

POINTWISE_OPS: tuple[type[FusionOp], ...] = tuple(c for c in TENSOR_OPS if c.POINTWISE)
"""Ops computing one output element from the same-index operand elements."""

BY_NAME: dict[str, type[FusionOp]] = {c.name.removeprefix("fusion."): c for c in TENSOR_OPS}

for _cls in TENSOR_OPS:  # fusion.AddOp, ... (module __getattr__ of fusion.py)
    globals()[_cls.__name__] = _cls

Fusion = Dialect("fusion", [MeshOp, *TENSOR_OPS], [ShardingAttr])


def op_class(name: str) -> type[FusionOp]:
    """The op class of `name` (`add` or `fusion.add`); KeyError if none."""
    return BY_NAME[name.removeprefix("fusion.")]
