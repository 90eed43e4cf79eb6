"""The Python builder: ops, schedule, text round trip, errors."""

from __future__ import annotations

import pytest

from fuserc.api import FusionDefinition
from fuserc.diagnostics import Diagnostic


def mlp() -> FusionDefinition:
    fd = FusionDefinition()
    x = fd.define_tensor([64, 16], "f32")
    w1 = fd.define_tensor([16, 32], "f32")
    w2 = fd.define_tensor([32, 16], "f32")
    h = fd.ops.gelu(fd.ops.matmul(x, w1), approximate="tanh")
    y = fd.ops.matmul(h, w2)
    fd.add_output(fd.ops.sum(y, [1], keepdim=True))
    fd.sched.mesh("tp", [4])
    fd.sched.shard(x, "tp", ["DIDx", "-"])
    fd.sched.shard(w1, "tp", ["-", "DIDx"])
    fd.sched.parallelize(w2, 0, "DIDx")
    return fd


def test_to_mlir_verifies_and_has_shardings() -> None:
    fd = mlp()
    text = fd.to_mlir()
    fd.verify()
    assert "fusion.mesh @tp shape = [4]" in text
    assert "#fusion.sharding<@tp, [DIDx, -]>" in text
    assert "#fusion.sharding<@tp, [-, DIDx]>" in text
    assert '{approximate = "tanh"}' in text
    assert "dims = [1] keepdim = true" in text


def test_builder_text_builder_round_trip() -> None:
    text = mlp().to_mlir()
    fd2 = FusionDefinition.from_mlir(text)
    assert fd2.to_mlir() == text
    assert [t.shape for t in fd2.inputs] == [(64, 16), (16, 32), (32, 16)]
    assert fd2.outputs[0].shape == (64, 1)


def test_every_op_builds_valid_ir() -> None:
    fd = FusionDefinition()
    a = fd.define_tensor([4, 6], "bf16")
    b = fd.define_tensor([4, 6], "bf16")
    w = fd.define_tensor([3, 6], "bf16")
    bias = fd.define_tensor([3], "bf16")
    outs = [
        fd.ops.linear(a, w, bias), fd.ops.linear(a, w), fd.ops.add(a, b), fd.ops.sub(a, b),
        fd.ops.mul(a, b), fd.ops.div(a, b), fd.ops.maximum(a, b), fd.ops.relu(a), fd.ops.neg(a),
        fd.ops.exp(a), fd.ops.tanh(a), fd.ops.sigmoid(a), fd.ops.silu(a), fd.ops.gelu(a),
        fd.ops.cast(a, "f32"), fd.ops.set(a), fd.ops.max(a, [0]), fd.ops.permute(a, [1, 0]),
        fd.ops.reshape(a, [24]), fd.ops.broadcast_in_dim(bias, [5, 3], [1]),
        fd.ops.slice(a, [1, 0], [3, 6]), fd.ops.softmax(a, 1),
    ]  # fmt: skip
    for t in outs:
        fd.add_output(t)
    fd.verify()
    assert FusionDefinition.from_mlir(fd.to_mlir()).to_mlir() == fd.to_mlir()


def test_shape_errors_are_diagnostics() -> None:
    fd = FusionDefinition()
    a = fd.define_tensor([4, 6])
    with pytest.raises(Diagnostic, match="contracted extents"):
        fd.ops.matmul(a, a)
    with pytest.raises(Diagnostic, match="unknown mesh"):
        fd.sched.shard(a, "nope", ["DIDx", "-"])
    fd.sched.mesh("tp", [4])
    with pytest.raises(Diagnostic, match="not divisible"):
        fd.sched.shard(a, "tp", ["-", "DIDx"])
    with pytest.raises(Diagnostic, match="unsupported dtype"):
        fd.define_tensor([2], "f8")
