"""The pieces every benchmark under bench/ is built from; the scripts beside this folder are
thin drivers over them (their command lines, tables and JSON are theirs).

    launch       starting the ranks: under torchrun, or spawned here, and rank 0's result back
    world        one rank's view: rank, size, device, and agreement across the ranks
    sizes        message sizes: parsing "64K", the -b/-e/-f sweep, printing them
    collectives  each collective described once, as nccl-tests does: bytes moved, bus-bandwidth
                 factor, the torch.distributed call, the exact reference of its check
    patterns     the integer-valued data that every dtype holds exactly, and its reductions
    checks       filling buffers with a pattern and counting wrong elements, block by block
    timing       clocks (perf_counter, CUDA events), the per-call median, rounds and spread
    sweep        one size of a collective sweep: the peers in turns, then their checks
    p2p          the point-to-point patterns described once, as the OSU micro-benchmarks
                 do: latency, bw, bibw; bytes moved, the torch.distributed and mpi4py calls,
                 the exact check
    p2p_sweep    one size of a point-to-point sweep: the peers in turns, then their checks
    ceilings     the memory-bandwidth ceiling measured beside the peers
    table        the fixed-width text table (nccl-tests' columns)
    peers/       the implementations measured beside pycomm: gloo, mpi (and mpi_p2p),
                 deepspeed, nccl, symm_mem, and pycomm's own columns
The JSON layout is pycomm.tools.results_schema, which the installed scaling model reads too.

bench/mpi_collectives.py and bench/mpi_p2p.py run under mpirun with numpy alone: the
modules they import (collectives, p2p, patterns, checks, timing, launch, peers.mpi,
peers.mpi_p2p) import neither torch nor numpy at their top level.
"""
import os
import sys

# Benchmarks run as scripts (python3 bench/x.py): make the checkout's pycomm importable
# without installing it, and ahead of an installed one, so that the build in place is measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
