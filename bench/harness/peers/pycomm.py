"""pycomm's own columns: pycomm as a torch.distributed backend (a dist.new_group with
backend "pycomm", called through dist.*), its direct API pycomm.all_reduce (with and without
the restore-on-failure copy), and, on CUDA tensors, each of its algorithms."""
from __future__ import annotations

from typing import Optional

from .peer import Peer, through_dist, torch_op

# The name `import pycomm` registers with torch.distributed.
BACKEND = "pycomm"
# The direct API's algorithms on CUDA tensors.
CUDA_ALGORITHMS = ("auto", "direct", "two_shot", "ring")


def backend_group(world, name: str = BACKEND):
    """(a process group of backend `name` that all-reduces this world's device's tensors,
    None), or (None, why not)."""
    import pycomm  # noqa: F401  (registers the backend)

    dist = world.dist
    if name not in dist.Backend.backend_list:
        return None, (f"'{name}' is not a registered torch.distributed backend after "
                      f"`import pycomm` (Backend.backend_list: "
                      f"{', '.join(dist.Backend.backend_list)})")

    def make():
        group = dist.new_group(backend=name)
        dist.all_reduce(world.torch.ones(4, device=world.device), group=group)
        return group

    group, err = world.on_every_rank(make)
    if err:
        return None, f"a {name!r} group does not run on {world.device.type} tensors ({err})"
    return group, None


def backend_peer(world, op_name: str, name: str = BACKEND):
    """(the backend group's column, None) or (None, why not). An op or dtype it refuses
    drops it from a collective later, with the error."""
    group, why = backend_group(world, name)
    if group is None:
        return None, why
    p = Peer("pycomm", "pycomm_backend",
             f"pycomm = dist.new_group(backend={name!r}) through dist.*")
    p.group = group
    return through_dist(p, world.dist, group, torch_op(world.dist, op_name)), None


def direct_peers(world, op_name: str, algorithm: str):
    """pycomm.all_reduce with and without restore-on-failure: ([peers], [notes])."""
    import pycomm

    _, err = world.on_every_rank(pycomm.init)
    if err:
        return [], [f"direct API absent: pycomm.init() failed: {err}"]
    op = op_name if op_name != "premul_sum" else torch_op(world.dist, op_name)
    out, notes = [], []
    kinds = (("direct", "pycomm_direct", None, "pycomm.all_reduce, the direct API"),
             ("norestore", "pycomm_norestore", False,
              "the direct API with restore_on_failure=False"))
    for label, key, restore, what in kinds:
        def call(i, o, restore=restore):
            pycomm.all_reduce(o, op=op, algorithm=algorithm, restore_on_failure=restore)

        _, err = world.on_every_rank(lambda: call(None, world.torch.ones(1)))
        if err:
            notes.append(f"{label} absent for op {op_name}: {err}")
            break  # norestore is shown beside direct, not alone
        p = Peer(label, key, f"{label} = {what}")
        p.calls, p.exact = {"all_reduce": call}, {"all_reduce": True}
        out.append(p)
    return out, notes


def ring_support(world) -> Optional[str]:
    """None when pycomm's ring hook can run on this world's device, else why not."""
    if world.device.type != "cuda":
        return None
    import pycomm

    def probe():
        if not pycomm.cuda_built():
            raise RuntimeError("pycomm was built without CUDA")
        pycomm.all_reduce(world.torch.ones(4, device=world.device))

    _, err = world.on_every_rank(probe, limit=120)
    return None if err is None else f"pycomm's CUDA transport is not available ({err})"


def cuda_candidates():
    """The direct API per CUDA algorithm: name -> (prepare, None), where prepare(t) returns
    a call that all-reduces t in place and returns it."""
    import pycomm

    def prepare(algorithm):
        return lambda t: (lambda: (pycomm.all_reduce(t, algorithm=algorithm), t)[1])

    return {f"pycomm {a}": (prepare(a), None) for a in CUDA_ALGORITHMS}
