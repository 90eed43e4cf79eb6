// mlir-opt habits: MLIR's textual pipeline (-p or --pass-pipeline, nested
// under builtin.module or any), options given to the default pipeline, both
// spellings of an option, `-o -` as standard output, --list-passes.

// The two forms of a pipeline give the same IR.
// RUN: %fuserc opt %examples/allgather_matmul.mlir -p 'propagate-shardings,make-resharding-contiguous' > %t.flat
// RUN: %fuserc opt %examples/allgather_matmul.mlir --pass-pipeline 'builtin.module(propagate-shardings,make-resharding-contiguous)' > %t.nested
// RUN: %fuserc opt %examples/allgather_matmul.mlir -p 'any(propagate-shardings, make-resharding-contiguous)' > %t.any
// RUN: cmp %t.flat %t.nested
// RUN: cmp %t.flat %t.any

// default{option=value} gives the option to the pass of the pipeline that
// has it; dashes (the docs' spelling) and underscores both work.
// RUN: %fuserc opt %examples/allgather_matmul.mlir -p 'default{algorithm=ring}' | filecheck %s --check-prefix=RING
// RING: hir.pipeline = {algorithm = "ring", chunks = 4 : i64, streams = 4 : i64
// RUN: %fuserc opt %examples/allgather_matmul.mlir --pass-pipeline 'builtin.module(default{algorithm=collective num-streams=3})' | filecheck %s --check-prefix=COLLECTIVE
// RUN: %fuserc opt %examples/allgather_matmul.mlir -p 'default{algorithm=collective num_streams=3}' | filecheck %s --check-prefix=COLLECTIVE
// COLLECTIVE: hir.pipeline = {algorithm = "collective", chunks = 4 : i64, streams = 3 : i64
// RUN: %fuserc opt %examples/allgather_matmul.mlir -p 'default{backend=mpi}' | filecheck %s --check-prefix=BACKEND
// BACKEND: hir.allgather {{.*}}backend = mpi

// -o - is standard output (no file named '-' is written).
// RUN: rm -rf %t.dir && mkdir %t.dir && cd %t.dir && %fuserc opt %s -o - | filecheck %s --check-prefix=STDOUT
// RUN: %python -c "import os, sys; sys.exit(os.path.exists(sys.argv[1]))" %t.dir/-
// STDOUT: fusion.mesh @tp shape = [4]

// Pipelines that cannot be run are usage errors that say why.
// RUN: %exitcode %fuserc opt %s --pass-pipeline 'builtin.module(func.func(propagate-shardings))' 2>&1 | filecheck %s --check-prefix=NESTED
// NESTED: error: invalid pass pipeline 'builtin.module(func.func(propagate-shardings))': fuserc's passes run on the whole module, not nested under 'func.func': write them directly in builtin.module(...)
// NESTED-NEXT: exit code: 2
// RUN: %exitcode %fuserc opt %s -p 'func.func(propagate-shardings)' 2>&1 | filecheck %s --check-prefix=ANCHOR
// ANCHOR: error: invalid pass pipeline 'func.func(propagate-shardings)': a pipeline nests under builtin.module(...) only (fuserc's passes run on the whole module), not under 'func.func'
// ANCHOR-NEXT: exit code: 2
// RUN: %exitcode %fuserc opt %s -p 'builtin.module(default' 2>&1 | filecheck %s --check-prefix=UNBALANCED
// UNBALANCED: error: invalid pass pipeline 'builtin.module(default': unbalanced parentheses
// UNBALANCED-NEXT: exit code: 2
// RUN: %exitcode %fuserc opt %s --pass-pipeline 'builtin.module(default, stream-pipeline{algorithm=ring nu#m-streams=1})' 2>&1 | filecheck %s --check-prefix=COLUMN
// COLUMN: error: invalid pass pipeline 'builtin.module(default, stream-pipeline{algorithm=ring nu#m-streams=1})': unknown token (column 58)
// COLUMN-NEXT: builtin.module(default, stream-pipeline{algorithm=ring nu#m-streams=1})
// COLUMN-NEXT: {{^                                                         \^$}}
// COLUMN-NEXT: exit code: 2
// RUN: %exitcode %fuserc opt %s -p 'default{bogus=1}' 2>&1 | filecheck %s --check-prefix=DEFAULT-OPTION
// DEFAULT-OPTION: error: no pass of the pipeline 'default' has an option 'bogus' (its options: algorithm, backend, chunks, links, num-streams, ring-form, token-chunks; --list-passes)
// DEFAULT-OPTION-NEXT: exit code: 2
// RUN: %exitcode %fuserc opt %s -p 'stream-pipeline{num_streams=-1}' 2>&1 | filecheck %s --check-prefix=VALUE
// VALUE: error: invalid options for pass 'stream-pipeline': num-streams must be >= 0 (0: one per chunk), got -1
// VALUE-NEXT: exit code: 2

// --list-passes: every pass, each option with its type, default and meaning
// (dashed, as the docs spell it), and the pipelines; no input is read.
// RUN: %exitcode %fuserc opt --list-passes < /dev/null | filecheck %s --check-prefix=LIST
// LIST:      Passes (-p 'a,b{option=value other=value}' or --pass-pipeline 'builtin.module(a,b{option=value})'):
// LIST-NEXT:   propagate-shardings
// LIST-NEXT:       gives every tensor without a sharding one
// LIST-NEXT:   chunk-experts
// LIST-NEXT:       cuts each expert-parallel dispatch -> experts -> combine chain into token chunks
// LIST-NEXT:     token-chunks=int (default: none)
// LIST-NEXT:         the chunk count (1: no chunking); none: the cost model chooses
// LIST-NEXT:   make-resharding-contiguous
// LIST-NEXT:       makes every op local compute
// LIST-NEXT:   lower-to-host-ir
// LIST-NEXT:       turns every fusion function into a host program
// LIST-NEXT:     backend=str (default: nccl)
// LIST-NEXT:         the backend named on every communication: nccl, cuda_ipc or mpi
// LIST-NEXT:   stream-pipeline
// LIST-NEXT:       overlaps communication with compute
// LIST-NEXT:     algorithm=str (default: auto)
// LIST-NEXT:         auto (the cost model chooses), collective, ring, or none
// LIST-NEXT:     num-streams=int (default: 0)
// LIST-NEXT:         the worker stream pool; 0: one stream per chunk, at most 8
// LIST-NEXT:     chunks=int (default: none)
// LIST-NEXT:         the chunk count S of sites without a written Stream split
// LIST-NEXT:     links=str (default: "")
// LIST-NEXT:         a links JSON file for the cost model
// LIST-NEXT:     ring-form=str (default: auto)
// LIST-NEXT:         the GEMM+ReduceScatter ring's form
// LIST-NEXT:   plan-memory
// LIST-NEXT:       lets buffers whose device work never overlaps (in stream order) share one block of memory
// LIST-NEXT:   autodiff
// LIST-NEXT:       derives @ENTRY_fwd and @ENTRY_bwd (the vector-Jacobian product) beside a fusion function
// LIST-NEXT:     entry=str (default: main)
// LIST-NEXT:         the function to differentiate
// LIST-NEXT:     save=str (default: activations)
// LIST-NEXT:         what the forward returns for the backward
// LIST-NEXT:     gathered-mib=int (default: -1)
// LIST-NEXT:         with save=activations, the MiB per device that saved gathered GEMM inputs may take
// LIST-NEXT:     budget=int (default: -1)
// LIST-NEXT:         with save=activations, the MiB per device that the saved tensors may take (-1: no limit); past it, the backward recomputes
// LIST-NEXT:     token-chunks=int (default: none)
// LIST-NEXT:         the token chunks of each expert-parallel layer, cut before the derivation
// LIST-NEXT: Pipelines (an option given to a pipeline, default{algorithm=ring}, goes to its pass that has it):
// LIST-NEXT:   default
// LIST-NEXT:       propagate-shardings,chunk-experts,make-resharding-contiguous,lower-to-host-ir,stream-pipeline,plan-memory
// LIST-NEXT: exit code: 0

// Registered passes not written yet are listed as such.
// RUN: %testopt opt --list-passes | filecheck %s --check-prefix=TEST-LIST
// TEST-LIST:      test-tag
// TEST-LIST-NEXT:   tags the module
// TEST-LIST-NEXT:   label=str (default: none)
// TEST-LIST-NEXT:     the tag
// TEST-LIST:      test-missing
// TEST-LIST-NEXT:   (pass 'test-missing' is not available in this version of fuserc)

fusion.mesh @tp shape = [4]
