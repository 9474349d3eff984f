"""The implementations the benchmarks measure beside pycomm, one module each, and pycomm's
own columns. A peer that cannot run here says why in one line instead of failing the run:

    peer      what a column is: its label, JSON key, the call per collective, and why it
              was dropped from one
    gloo      the default group the bench starts (gloo on CPUs): the stock backend
    pycomm    pycomm as a torch.distributed backend group, its direct API (with and without
              the restore-on-failure copy), and its CUDA algorithms
    fake_hosts  --hosts: the hierarchical backend over ranks posing as hosts, and the intra-
              and inter-host sweeps that calibrate the scaling model
    mpi       Open MPI through mpi4py: in the bench's own ranks, in turns with the others,
              where mpirun started them; else timed in its own mpirun launch
    mpi_p2p   Open MPI's point-to-point column (harness.p2p's patterns), either way
    torch_floor  torch's own per-call cost: the same dist.* calls on a backend that moves
              nothing (pycomm._C.make_null_backend), the floor under the pycomm column
    deepspeed DeepSpeed's shared-memory all-reduce (its op torch.ops.deepspeed.
              inference_all_reduce_)
    nccl      whether NCCL can run these ranks on these GPUs, and its all-reduce
    symm_mem  PyTorch's symmetric-memory one-shot and two-shot all-reduces
"""
