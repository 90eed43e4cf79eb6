"""The pass registry: every option of every pass has a meaning for
--list-passes, spelled as the docs spell it; both pipeline forms and
options given to the default pipeline build the same passes."""

from __future__ import annotations

import dataclasses

import pytest

from fuserc import pipeline as pl


@pytest.mark.parametrize("name", sorted(pl.PASSES))
def test_every_option_has_a_meaning(name: str) -> None:
    entry = pl.PASSES[name]
    options = pl.options_of(name)
    fields = [f.name for f in dataclasses.fields(pl.pass_class(name)) if f.init and f.name != "name"]
    assert [o.name for o in options] == [pl.dashed(f) for f in fields]
    assert set(entry.options) == {o.name for o in options}, f"fuserc/pipeline.py: {name}'s options and their meanings"
    assert entry.summary and all(o.meaning for o in options)


def test_forms_build_the_same_passes() -> None:
    flat = pl.build("propagate-shardings,stream-pipeline{algorithm=ring num-streams=2}")
    for spec in (
        "builtin.module(propagate-shardings,stream-pipeline{algorithm=ring num_streams=2})",
        " any( propagate-shardings , stream-pipeline{num-streams=2 algorithm=ring} ) ",
    ):
        assert pl.build(spec) == flat
    default = pl.build("default{algorithm=ring backend=mpi token-chunks=2}")
    assert [p.name for p in default] == list(pl.PIPELINES["default"])
    passes = {p.name: p for p in default}
    assert passes["lower-to-host-ir"].backend == "mpi" and passes["chunk-experts"].token_chunks == 2  # type: ignore[attr-defined]
    assert passes["stream-pipeline"].algorithm == "ring" and passes["stream-pipeline"].num_streams == 0  # type: ignore[attr-defined]
    assert pl.with_option("default", "stream-pipeline", "algorithm", "collective").endswith('stream-pipeline{algorithm="collective"},plan-memory')
    assert pl.build("") == [] and pl.build("builtin.module()") == []
