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


def test_a_partial_sum_over_several_axes_is_built_and_read_back() -> None:
    """`partial` names one type or several (any order: kept in mesh-axis
    order); the text round-trips; a bad type or one used twice is a
    diagnostic."""
    fd = FusionDefinition()
    x = fd.define_tensor([8, 16], "f32")
    w = fd.define_tensor([16, 8], "f32")
    y = fd.ops.matmul(x, w)
    fd.add_output(y)
    fd.sched.mesh("g", [2, 2])
    fd.sched.shard(x, "g", ["-", "DIDy*DIDx"])
    fd.sched.shard(w, "g", ["DIDy*DIDx", "-"])
    fd.sched.shard(y, "g", ["-", "-"], partial=["DIDx", "DIDy"])
    assert y.sharding is not None and y.sharding.partial == ("DIDy", "DIDx")
    text = fd.to_mlir()
    fd.verify()
    assert "#fusion.sharding<@g, [-, -], partial = [DIDy, DIDx]>" in text
    assert FusionDefinition.from_mlir(text).to_mlir() == text
    with pytest.raises(Diagnostic, match="partial must be DIDx, DIDy or DIDz, got 'DIDw'"):
        fd.sched.shard(y, "g", ["-", "-"], partial=["DIDy", "DIDw"])
    with pytest.raises(Diagnostic, match="parallel type DIDx appears more than once"):
        fd.sched.shard(y, "g", ["DIDx", "-"], partial=["DIDy", "DIDx"])


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


# ---- the transformer ops: one method each, numbers, operators, int dims -------------------------


def _transformer_definition() -> tuple[FusionDefinition, list]:
    """Every transformer op through its `fd.ops` method, with Python numbers
    as operands, operators and ints for dims."""
    fd = FusionDefinition()
    x = fd.define_tensor([4, 8], "f32")
    p = fd.define_tensor([4, 8], "f32")
    b = fd.define_tensor([8], "f32")
    h = fd.define_tensor([2, 4, 8], "f32")
    w = fd.define_tensor([8], "f32")
    q = fd.define_tensor([1, 4, 6, 8], "f32")
    k = fd.define_tensor([1, 2, 6, 8], "f32")
    ids = fd.define_tensor([2, 3], "i64")
    table = fd.define_tensor([10, 8], "f32")
    labels = fd.define_tensor([4], "i64")
    seed = fd.define_tensor([], "i64")
    o = fd.ops
    outs = [
        o.rsqrt(p), o.sqrt(p), o.log(p), o.abs(x), o.erf(x), o.reciprocal(p), o.sin(x), o.cos(x),
        o.pow(p, 0.5), o.pow(2.0, x), o.minimum(x, b), o.minimum(x, 0),
        o.lt(x, b), o.le(x, 0.25), o.gt(x, b), o.ge(x, 0), o.eq(x, x), o.ne(x, b),
        o.where(o.lt(x, 0), x, -1.5), o.constant(0.125, "f32"), o.iota([4, 8], 1), o.iota([4, 8], dim=0, dtype="f32"),
        o.mean(x, 1), o.mean(h, [0, 2], keepdim=True), o.min(x, 0), o.var(h, -1, correction=0), o.var(x, [0, 1]),
        o.layer_norm(h, w, b, 2, 1e-3), o.layer_norm(h, w, 2), o.layer_norm(h, w, dims=-1, eps=0.5),
        o.rms_norm(h, w, 2, 1e-6), o.log_softmax(x, 1), o.log_softmax(x, dim=0),
        o.sdpa(q, k, k, causal=True), o.sdpa(q, k, k, 0.25),
        o.embedding(ids, table), o.cross_entropy(x, labels), o.dropout(x, seed, 0.0),
        o.concat([x, p], 0), o.concat(x, p, x, dim=1),
        x @ o.permute(x, [1, 0]), x + 1, 2 - x, x * b, x / 4, 1 / p, -x, x - b,
    ]  # fmt: skip
    for t in outs:
        fd.add_output(t)
    return fd, [x, p, b, h, w, q, k, ids, table, labels, seed]


def _expected(a: list) -> list:
    import torch
    import torch.nn.functional as F

    x, p, b, h, w, q, k, ids, table, labels, seed = a
    gqa = q.shape[1] != k.shape[1]
    return [
        p.rsqrt(), p.sqrt(), p.log(), x.abs(), torch.erf(x), p.reciprocal(), x.sin(), x.cos(),
        p ** 0.5, 2.0 ** x, torch.minimum(x, b), torch.clamp(x, max=0),
        x < b, x <= 0.25, x > b, x >= 0, x == x, x != b,
        torch.where(x < 0, x, torch.tensor(-1.5, dtype=x.dtype)), torch.tensor(0.125, dtype=x.dtype),
        torch.arange(8).expand(4, 8), torch.arange(4.0, dtype=x.dtype)[:, None].expand(4, 8),
        x.mean(1), h.mean((0, 2), keepdim=True), x.amin(0), h.var(-1, correction=0), x.var((0, 1)),
        F.layer_norm(h, [8], w, b, 1e-3), F.layer_norm(h, [8], w), F.layer_norm(h, [8], w, eps=0.5),
        F.rms_norm(h, [8], w, 1e-6), x.log_softmax(1), x.log_softmax(0),
        F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=gqa),
        F.scaled_dot_product_attention(q, k, k, scale=0.25, enable_gqa=gqa),
        F.embedding(ids, table), F.cross_entropy(x, labels), x,
        torch.cat([x, p], 0), torch.cat([x, p, x], 1),
        x @ x.T, x + 1, 2 - x, x * b, x / 4, 1 / p, -x, x - b,
    ]  # fmt: skip


def test_transformer_ops_build_round_trip_and_compute_as_torch() -> None:
    import torch

    from fuserc.ir import parse
    from fuserc.runtime.evaluator.reference import evaluate

    fd, _ = _transformer_definition()
    fd.verify()
    text = fd.to_mlir()
    assert FusionDefinition.from_mlir(text).to_mlir() == text
    for piece in ("fusion.mean %in0 dims = [1] :", "fusion.var %in3 dims = [-1] correction = 0 :",
                  "fusion.layer_norm %in3, %in4 dims = [2] :", "fusion.constant 0.5 : () -> tensor<f32>",
                  "fusion.sdpa %in5, %in6, %in6 scale = 0.25 :", "fusion.iota dim = 1 : () -> tensor<4x8xi64>"):
        assert piece in text, piece
    gen = torch.Generator().manual_seed(5)
    args = [
        torch.randn(4, 8, generator=gen), torch.rand(4, 8, generator=gen) + 0.5, torch.randn(8, generator=gen),
        torch.randn(2, 4, 8, generator=gen), torch.randn(8, generator=gen), torch.randn(1, 4, 6, 8, generator=gen),
        torch.randn(1, 2, 6, 8, generator=gen), torch.randint(0, 10, (2, 3), generator=gen),
        torch.randn(10, 8, generator=gen), torch.randint(0, 8, (4,), generator=gen), torch.tensor(3),
    ]  # fmt: skip
    got = evaluate(parse(text), args, accumulate=None)
    want = _expected(args)
    assert len(got) == len(want)
    for i, (g, e) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, msg=lambda m, i=i: f"output {i}: {m}")


def test_numbers_take_the_tensor_type_and_operators_build_ops() -> None:
    fd = FusionDefinition()
    x = fd.define_tensor([4, 8], "bf16")
    w = fd.define_tensor([8, 2], "bf16")
    for t in (x + 1, 3 * x, x / 2, 1 / x, -x, x @ w, 2 - x):
        fd.add_output(t)
    text = fd.to_mlir()
    assert text.count("fusion.constant") == 5 and "() -> tensor<bf16>" in text
    assert "fusion.matmul %in0, %in1" in text and "fusion.neg %in0" in text and "fusion.sub %t" in text
    ids = fd.define_tensor([3], "i64")
    fd.add_output(fd.ops.eq(ids, 2))
    assert "fusion.constant 2.0 : () -> tensor<i64>" in fd.to_mlir()


def test_builder_errors_leave_the_definition_as_it_was() -> None:
    fd = FusionDefinition()
    x = fd.define_tensor([4, 8], "f32")
    seed = fd.define_tensor([], "i64")
    before = fd.to_mlir()
    cases = [
        (lambda: fd.ops.dropout(x, seed, 1.0), r"dropout probability p = 1.0 must be in \[0, 1\)"),
        (lambda: fd.ops.where(x, x, 1.0), "operand #0 has element type f32; it must be i1"),
        (lambda: fd.ops.layer_norm(x, fd.define_tensor([4], "f32"), 0), "normalizes trailing dimensions"),
        (lambda: fd.ops.add(1, 2), "a number operand needs a tensor operand"),
        (lambda: fd.ops.cross_entropy(x, fd.define_tensor([4], "f32")), "it must be i64"),
        (lambda: fd.ops.sdpa(x, x, x), r"sdpa: q must be \[batch, heads, seq, head_dim\]"),
        (lambda: fd.ops.mean(x, 1, 2, 3), "too many arguments"),
        (lambda: fd.ops.concat([x, fd.define_tensor([4, 4], "f32")], 0), "must agree except in dimension 0"),
    ]
    for build, message in cases:
        with pytest.raises(Diagnostic, match=message):
            build()
    with pytest.raises(AttributeError, match="fusion has no op 'softplus'"):
        fd.ops.softplus(x)
    after = fd.to_mlir()
    assert "fusion.constant" not in after and after.count("fusion.") == before.count("fusion.")


# ---- every builder's signature and documentation, from the op class -------------------------

UNARY = "relu neg abs exp log tanh sigmoid silu gelu rsqrt sqrt erf reciprocal sin cos set".split()
BINARY = "add sub mul div pow maximum minimum lt le gt ge eq ne".split()


def _calls(fd: FusionDefinition) -> dict[str, dict]:
    """One call of every builder, every argument by the name its signature
    gives it (a variadic operand under "*")."""
    t = fd.define_tensor
    x, y, b, h, w = t([4, 8]), t([4, 8]), t([8]), t([2, 4, 8]), t([8])
    q, k, lse = t([1, 4, 6, 8]), t([1, 2, 6, 8]), t([1, 4, 6])
    ids, table, labels, seed, cond = t([2, 3], "i64"), t([10, 8]), t([4], "i64"), t([], "i64"), t([4, 8], "i1")
    calls: dict[str, dict] = {n: {"input": x} for n in UNARY}
    calls |= {n: {"lhs": x, "rhs": b} for n in BINARY}
    calls["gelu"] = {"input": x, "approximate": "tanh"}
    calls |= {
        "matmul": {"lhs": x, "rhs": fd.define_tensor([8, 3])},
        "linear": {"input": x, "weight": t([3, 8]), "bias": t([3])},
        "cast": {"input": x, "dtype": "bf16"},
        "where": {"condition": cond, "lhs": x, "rhs": y},
        "constant": {"value": 0.5, "dtype": "f32"},
        "iota": {"shape": [4, 8], "dim": 1, "dtype": "f32"},
        "dropout": {"input": x, "seed": seed, "p": 0.25},
        "sum": {"input": h, "dims": [0, 2], "keepdim": True},
        "max": {"input": x, "dims": 1}, "min": {"input": x, "dims": [0]}, "mean": {"input": h, "dims": -1},
        "var": {"input": h, "dims": [2], "correction": 0, "keepdim": True},
        "permute": {"input": h, "dims": [2, 0, 1]}, "reshape": {"input": h, "shape": [8, 8]},
        "broadcast_in_dim": {"input": b, "shape": [5, 8], "dims": [1]},
        "slice": {"input": x, "starts": [1, 0], "limits": [3, 8]},
        "concat": {"*": [x, y, x], "dim": 1},
        "softmax": {"input": x, "dim": 1}, "log_softmax": {"input": x, "dim": 0},
        "layer_norm": {"input": h, "weight": w, "bias": b, "dims": [2], "eps": 1e-3},
        "rms_norm": {"input": h, "weight": w, "dims": [2], "eps": 1e-6},
        "sdpa": {"query": q, "key": k, "value": k, "scale": 0.25, "causal": True},
        "sdpa_grad": {"query": q, "key": k, "value": k, "out": q, "lse": lse, "grad": q, "causal": True},
        "embedding": {"ids": ids, "table": table},
        "embedding_grad": {"grad": t([6, 8]), "ids": t([6], "i64"), "vocab": 10},
        "cross_entropy": {"logits": x, "labels": labels},
    }  # fmt: skip
    rows, src, ends = t([6], "i64"), t([6, 8]), t([3], "i64")
    calls |= {
        "topk": {"input": x, "k": 2, "dim": 1}, "argsort": {"input": labels, "dim": 0, "descending": True},
        "cumsum": {"input": x, "dim": 1}, "bincount": {"ids": rows, "length": 5},
        "gather": {"input": x, "index": t([4, 2], "i64"), "dim": 1},
        "scatter_add": {"input": x, "index": t([4, 2], "i64"), "source": t([4, 2]), "dim": 1},
        "index_select": {"input": x, "index": rows, "dim": 0},
        "index_add": {"input": x, "index": rows, "source": src, "dim": 0},
        "grouped_matmul": {"lhs": src, "rhs": t([3, 8, 5]), "offsets": ends},
        "dispatch": {"input": x, "ids": t([4, 2], "i64"), "experts": 3},
        "combine": {"input": t([3, 4, 8]), "ids": t([4, 2], "i64")},
        "place_rows": {"rows": src, "counts": t([2, 3], "i64"), "slots": 4},
        "pick_rows": {"input": t([3, 4, 8]), "counts": t([2, 3], "i64"), "rows": 6},
    }  # fmt: skip
    return calls


def test_every_builder_has_the_ops_signature_and_documentation() -> None:
    """`fd.ops.<op>` has a real signature (operands, keywords, result needs,
    defaults) and the op class's docstring; a call by those names builds
    the op with those keywords, and the same call by position (where the
    signature allows it) builds the same op."""
    import inspect
    import pydoc

    from fuserc.dialects.fusion_ops import BY_NAME

    fd = FusionDefinition()
    calls = _calls(fd)
    assert set(calls) == set(BY_NAME), set(BY_NAME) ^ set(calls)
    for name, cls in BY_NAME.items():
        doc = cls.__dict__.get("__doc__")
        assert doc and doc.strip(), f"{cls.__name__} has no docstring"
        build = getattr(fd.ops, name)
        sig = inspect.signature(build)
        params = sig.parameters
        assert list(params) != ["args", "kwargs"], name
        keywords = {k for k, _ in cls.KEYWORDS}
        assert keywords <= set(params), f"{name}: keywords {keywords - set(params)} missing from {sig}"
        operands = [n.strip("*?") for n in cls.OPERANDS]
        assert list(params)[: len(operands)] == operands, f"{name}: {sig}"
        text = pydoc.render_doc(build, renderer=pydoc.plaintext)
        assert f"{name}{sig}" in text and inspect.cleandoc(doc).splitlines()[0] in text, text
        # by name
        call = dict(calls[name])
        variadic = call.pop("*", [])
        bound = sig.bind(*variadic, **call)  # the names are the signature's
        made = len(fd._ops)
        build(*bound.args, **bound.kwargs)
        op = fd._ops[-1]
        assert len(fd._ops) > made and op.name == name, name
        given = {k: v for k, v in call.items() if k in keywords}
        for k, v in given.items():
            want = [v] if isinstance(v, int) and dict(cls.KEYWORDS)[k] == "ints" else v
            assert op.keywords.get(k, cls.DEFAULTS.get(k)) == want, f"{name}: {k} = {op.keywords.get(k)}, given {v}"
        # by position, as far as the signature allows
        positional, rest = [*variadic], dict(call)
        for p in params.values():  # the longest run of positional ones given
            if p.kind is not p.POSITIONAL_OR_KEYWORD or p.name not in rest:
                break
            positional.append(rest.pop(p.name))
        build(*positional, **rest)
        again = fd._ops[-1]
        assert (again.name, again.keywords, again.attrs, again.result.shape, again.result.dtype) == (
            op.name, op.keywords, op.attrs, op.result.shape, op.result.dtype
        ), name
        # a required argument left out: the signature and the builder both refuse
        required = [p for p in params.values() if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
        if required:
            short = {k: v for k, v in call.items() if k != required[-1].name}
            with pytest.raises(TypeError):
                sig.bind(*variadic, **short)
            with pytest.raises(Diagnostic):
                build(*variadic, **short)
    fd.verify()


def test_help_of_a_builder() -> None:
    import inspect

    fd = FusionDefinition()
    assert str(inspect.signature(fd.ops.layer_norm)) == (
        "(input: fuserc.api.Tensor | float, weight: fuserc.api.Tensor | float, bias: fuserc.api.Tensor | None = None, "
        "*, dims: list[int] | int, eps: float = 1e-05, mean: bool = False, rstd: bool = False) -> fuserc.api.Tensor"
    )
    assert str(inspect.signature(fd.ops.sum)).startswith("(input: fuserc.api.Tensor | float, dims: list[int] | int, keepdim: bool = False)")
    assert fd.ops.layer_norm.__doc__.startswith("`torch.nn.functional.layer_norm` over the trailing `dims`")
    assert fd.ops.layer_norm.__name__ == "layer_norm"


def test_shard_tensor_of_an_input_without_a_written_sharding() -> None:
    """What the compiled program takes for an unannotated input: the
    sharding propagation gives it (a bias added to column-split rows is
    split too); whole in a definition without a mesh."""
    import torch

    from fuserc.api import shard_tensor
    from fuserc.runtime.evaluator.evaluator import find_host_program, signature
    from fuserc.runtime.evaluator.program import compile_module

    fd = FusionDefinition()
    x, w, b = fd.define_tensor([8, 4]), fd.define_tensor([4, 6]), fd.define_tensor([6])
    fd.add_output(fd.ops.add(fd.ops.matmul(x, w), b))
    mesh = fd.sched.mesh("tp", [2])
    fd.sched.shard(w, "tp", ["-", "DIDx"])
    compiled = compile_module(fd.to_mlir(), "<fd>")
    params, _ = signature(compiled.host, find_host_program(compiled.host, "main"))
    assert fd.sharding_of(b) == params[2].sharding and str(params[2].sharding) == "#fusion.sharding<@tp, [DIDx]>"
    assert fd.sharding_of(x) == params[0].sharding
    bias = torch.arange(6.0)
    assert torch.equal(shard_tensor(bias, b, mesh, 1), bias[3:])
    assert torch.equal(shard_tensor(torch.ones(8, 4), x, mesh, 1), torch.ones(8, 4))
    alone = FusionDefinition()
    a = alone.define_tensor([3])
    alone.add_output(alone.ops.relu(a))
    assert alone.sharding_of(a) is None
    assert torch.equal(shard_tensor(bias[:3], a, mesh, 1), bias[:3])
