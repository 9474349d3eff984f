"""The pieces every benchmark under bench/ is built from; the scripts beside this folder are
thin drivers over them (their command lines, tables and JSON are theirs).

    driver       the skeleton every driver shares: start the ranks, the header, one table per
                 item swept size by size, the summary and the JSON file
    launch       starting the ranks: under torchrun, under mpirun (each rank an MPI rank too),
                 or spawned here, and rank 0's result back
    world        one rank's view: rank, size, device, and agreement across the ranks
    sizes        message sizes: parsing "64K", the -b/-e/-f sweep, printing them
    collectives  each collective described once, as nccl-tests does: bytes moved, bus-bandwidth
                 factor, the torch.distributed call, the exact reference of its check
    patterns     the integer-valued data that every dtype holds exactly, and its reductions
    checks       filling buffers with a pattern and counting wrong elements, block by block
    timing       clocks (perf_counter, CUDA events), the per-call median, rounds and spread
    sweep        one size of a collective sweep: the peers in turns, then their checks; a
                 row's measured columns and ratios
    breakdown    where pycomm's time goes in one call, part by part (pycomm.tools.profile),
                 after a sweep's tables
    p2p          the point-to-point patterns described once, as the OSU micro-benchmarks
                 do: latency, bw, bibw; bytes moved, the torch.distributed and mpi4py calls,
                 the exact check
    p2p_sweep    one size of a point-to-point sweep: the peers in turns, then their checks
    ceilings     the memory-bandwidth ceiling measured beside the peers
    verdicts     judging a time against the best peer and the ceiling, with the rounds' range
    calibration  the all-reduce sweep that fits the scaling model's alpha and B
    table        the fixed-width text table (nccl-tests' columns)
    peers/       the implementations measured beside pycomm: gloo, mpi (and mpi_p2p),
                 deepspeed, nccl, symm_mem, pycomm's own columns, and torch_floor (torch's
                 own per-call cost)
    pipeline_model  the pipeline that bench/pipeline_perf.py times
  DDP training (bench/ddp_resnet50.py):
    ddp_modes    the modes: a hook (or none) and a group for DDP's buckets each
    ddp_data     the model and the synthetic data every mode trains on
    ddp_trainer  a mode's DDP model, its steps, the modes in turns, the 1-rank baseline
    hook_timer   a comm hook that marks each bucket's hand-over and completion
    step_parts   one step split into its parts; thread_cpu: the threads' CPU time
    ddp_records  a mode's record: speedup, efficiency, comm, the ratios to the ceilings, the
                 scaling model's prediction
    ddp_report   the tables and the target lines
The JSON layout is pycomm.tools.results_schema, which the installed scaling model reads too.

bench/mpi_worker.py runs under mpirun with numpy alone: the modules it imports (collectives,
p2p, patterns, checks, timing, launch, peers.peer, peers.mpi, peers.mpi_p2p) import neither
torch nor numpy at their top level.
"""
import os
import sys

# Benchmarks run as scripts (python3 bench/x.py): make the checkout's pycomm importable
# without installing it, and ahead of an installed one, so that the build in place is measured.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
