"""pycomm doctor: the environment as it matters for distributed training, and the common
mistakes of a training script found by reading it (``ast``; the script is never run).
"""
from __future__ import annotations

import ast
import os
import platform
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union
from ..host_cpus import placement, usable_cores
from ..units import human_bytes

__all__ = ["Finding", "check_script", "check_source", "environment", "findings_as_dicts",
           "format_environment", "format_findings", "mapped_segment_bytes"]

GIB = 1 << 30
# Docker gives a container 64 MiB of /dev/shm. DataLoader workers pass batches through it
# (and pycomm's posix transport maps its segments there); below 1 GiB they can run out.
_SHM_WARN_BYTES = 1 * GIB
# The world sizes doctor states a group's shared memory for.
_COST_WORLDS = (2, 4, 8, 16, 32)

# Settings that change how a distributed job starts or communicates; doctor shows those set.
_ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
             "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "NCCL_DEBUG",
             "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "GLOO_SOCKET_IFNAME",
             "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_DISTRIBUTED_DEBUG")


# --------------------------------------------------------------------------- the environment

def _try(fn, default):
    try:
        return fn()
    except Exception:  # doctor reports a broken piece; it must not die on it
        return default


def environment() -> Dict[str, Any]:
    """Facts about this machine and installation, as a JSON-able dict, with ``warnings``."""
    warnings: List[str] = []
    from pycomm._version import __version__  # torch-free, there even when the runtime is not

    info: Dict[str, Any] = {
        "pycomm": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }

    try:
        import torch
        import torch.distributed as dist
    except Exception as e:
        info["torch"] = f"not importable: {e}"
        warnings.append("torch cannot be imported; pycomm needs it")
        torch = dist = None

    if torch is not None:
        info["torch"] = torch.__version__
        info["cuda_runtime"] = torch.version.cuda
        nccl = _try(lambda: torch.cuda.nccl.version(), default="")
        if isinstance(nccl, tuple):
            nccl = ".".join(str(x) for x in nccl)
        info["nccl"] = nccl or None
        backends = {}
        for name in ("gloo", "nccl", "mpi", "ucc"):
            probe = getattr(dist, f"is_{name}_available", None)
            backends[name] = bool(_try(probe, default=False)) if probe else False
        info["backends"] = backends
        if not backends.get("gloo"):
            warnings.append("gloo is not available: CPU collectives (and pycomm.init) need it")

    shm_dir = os.environ.get("PYCOMM_SHM_DIR") or "/dev/shm"
    shm: Dict[str, Any] = {"dir": shm_dir}
    try:
        usage = shutil.disk_usage(shm_dir)
        shm.update(total_bytes=usage.total, free_bytes=usage.free)
        if usage.free < _SHM_WARN_BYTES:
            warnings.append(f"{shm_dir} has only {usage.free / (1 << 20):.0f} MiB free: DataLoader "
                            "workers (and pycomm's posix transport) need room there (docker: "
                            "--shm-size=8g, or PYCOMM_SHM_DIR=/a/larger/tmpfs)")
    except OSError as e:
        shm["error"] = str(e)
        warnings.append(f"{shm_dir} is not usable ({e}): DataLoader workers and pycomm's posix "
                        "transport need it (set PYCOMM_SHM_DIR to a tmpfs)")
    info["shm"] = shm
    info["transport"] = _try(_transport, default={"error": "pycomm's runtime is not importable"})
    info["single_copy"] = _try(_single_copy, default={"error": "pycomm's runtime is not importable"})
    taken = info["transport"].get("takes")
    if taken == "posix" and "error" in shm:
        warnings.append("pycomm takes the posix transport here and it has no usable directory")

    info["cpus"] = {"online": os.cpu_count(), "usable": usable_cores()}
    try:
        info["numa"] = placement()
    except ValueError as e:  # a PYCOMM_TOPOLOGY that says nothing valid
        info["numa"] = {"error": str(e)}
        warnings.append(str(e))

    gpus: List[Dict[str, Any]] = []
    peer: Dict[str, bool] = {}
    if torch is not None:
        count = _try(torch.cuda.device_count, default=0) if torch.cuda.is_available() else 0
        for i in range(count):
            props = _try(lambda: torch.cuda.get_device_properties(i), default=None)
            gpus.append({
                "index": i,
                "name": getattr(props, "name", "?"),
                "capability": f"{props.major}.{props.minor}" if props is not None else "?",
                "memory_bytes": getattr(props, "total_memory", None),
            })
        for i in range(count):
            for j in range(count):
                if i != j:
                    peer[f"{i}->{j}"] = bool(_try(
                        lambda: torch.cuda.can_device_access_peer(i, j), default=False))
        if count > 1 and not all(peer.values()):
            missing = ", ".join(k for k, v in peer.items() if not v)
            warnings.append(f"no CUDA peer access for {missing}: NCCL's P2P goes through "
                            "host memory there")
    info["gpus"] = gpus
    info["peer_access"] = peer

    vectors = None
    try:
        import pycomm
        built = bool(pycomm.cuda_built())
        vectors = pycomm.cpu_vector_path()
    except Exception as e:
        built = f"error: {e}"
    info["pycomm_cuda_built"] = built
    info["pycomm_cpu_vectors"] = vectors
    if vectors and vectors.startswith("none"):
        warnings.append(f"pycomm's CPU kernels were built without vector loops on this "
                        f"{platform.machine()} host: float16/bfloat16 reductions and bucket casts "
                        f"run as scalar loops (they need a target with AVX2 and F16C, or NEON: "
                        f"PYCOMM_MARCH=native or portable where the CPU has them)")
    if gpus and built is False:
        warnings.append("GPUs are present but pycomm was built without its CUDA kernels "
                        "(rebuild where nvcc is found, without PYCOMM_CUDA=0)")

    info["hosts"] = _try(_host_layout, default={"error": "pycomm's topology is not importable"})
    info["env"] = {k: os.environ[k] for k in _ENV_VARS if k in os.environ}
    info["env"].update({k: v for k, v in os.environ.items() if k.startswith("PYCOMM_")})
    info["warnings"] = warnings
    return info


def mapped_segment_bytes() -> int:
    """Bytes of this process's mappings of pycomm's segments, either transport's
    (memfd:pycomm-* or <PYCOMM_SHM_DIR>/pycomm-*), read from /proc/self/maps."""
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            path = fields[5] if len(fields) > 5 else ""
            if "memfd:pycomm-" in path or "/pycomm-" in path:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                total += end - start
    return total


def _transport() -> Dict[str, Any]:
    """Which shared-memory transport a group started here takes, why, and what a group costs."""
    from pycomm import _C, config, rendezvous

    setting = config.setting("shm_transport")
    taken = rendezvous.transports_taken(setting)
    costs = []
    for world in _COST_WORLDS:
        cost = _C.shared_memory_cost(world, config.communicator_config(world, 1.0))
        costs.append({"world": world, **cost})
    return {"setting": setting, "takes": taken[0] if taken else None,
            "memfd_unavailable": rendezvous.memfd_unavailable_reason(), "costs": costs}


def _transport_lines(t: Dict[str, Any]) -> List[str]:
    if "error" in t:
        return [f"transport    {t['error']}"]
    why = {"memfd": "anonymous memory passed between ranks over a Unix socket: nothing in /dev/shm",
           "posix": "files in PYCOMM_SHM_DIR, else /dev/shm, unlinked once mapped"}
    taken = t["takes"]
    if taken is None:
        lines = [f"transport    none: PYCOMM_SHM_TRANSPORT={t['setting']} but memfd is unavailable "
                 f"({t['memfd_unavailable']})"]
    else:
        lines = [f"transport    {taken} (PYCOMM_SHM_TRANSPORT={t['setting']}): {why[taken]}"]
        if t["memfd_unavailable"]:
            lines[-1] += f"; memfd is unavailable here: {t['memfd_unavailable']}"
    for c in t["costs"]:
        w, session, channel = c["world"], c["session_bytes"], c["channel_bytes"]
        lines.append(f"group memory {w:>2} ranks: {human_bytes(session)} "
                     f"({human_bytes(session // w)} a rank); point-to-point adds "
                     f"{human_bytes(channel)} per pair and direction that talks "
                     f"(a ring of sends {human_bytes(w * channel)}, "
                     f"every pair {human_bytes(w * (w - 1) * channel)})")
    return lines


def _single_copy() -> Dict[str, Any]:
    """Whether a group started here copies large messages once, straight out of a peer's
    memory (cross-memory attach), and why: the setting, Yama, and a probe between this
    process and a child of it, as a group's own probe reads its peers."""
    from pycomm import _C, config

    return {"setting": config.setting("single_copy"),
            "min_bytes": config.setting("single_copy_min_bytes"),
            "yama_ptrace_scope": _C.yama_ptrace_scope(),
            "unavailable": _C.single_copy_unavailable_reason()}


def _single_copy_lines(c: Dict[str, Any]) -> List[str]:
    if "error" in c:
        return [f"single copy  {c['error']}"]
    setting, scope, why_not = c["setting"], c["yama_ptrace_scope"], c["unavailable"]
    if setting == "off":
        return ["single copy  off (PYCOMM_SINGLE_COPY=off): every message goes through the "
                "shared-memory staging, copied in and out"]
    if why_not:
        verdict = ("set-up fails: PYCOMM_SINGLE_COPY=cma requires it" if setting == "cma"
                   else "groups stage every message, copied in and out")
        return [f"single copy  unavailable here ({why_not}): {verdict}"]
    lines = [f"single copy  {setting}: messages of {human_bytes(c['min_bytes'])} a rank and more are "
             "copied once, straight out of the peer's memory (cross-memory attach; "
             "PYCOMM_SINGLE_COPY, PYCOMM_SINGLE_COPY_MIN_KB)"]
    if scope == 1:
        lines.append("             Yama ptrace_scope 1: only groups of 2 ranks (each names its one peer "
                     "as its reader); larger groups stage")
    return lines


def _host_layout() -> Dict[str, Any]:
    """This process's host identity, and the layout torchrun's variables promise with what the
    backend would run on it (a job's real layout comes from every rank's identity, at set-up)."""
    from pycomm.rendezvous import host_identity
    from pycomm.topology import expected_layout

    out: Dict[str, Any] = {"identity": host_identity()}
    world, local = os.environ.get("WORLD_SIZE", ""), os.environ.get("LOCAL_WORLD_SIZE", "")
    if world.isdigit() and local.isdigit() and int(local) > 0:
        layout = expected_layout(int(world), int(local))
        out["layout"] = layout.describe()
        out["plan"] = layout.plan()
    return out


def _domain_line(numa: Dict[str, Any]) -> str:
    """What this process's pinning means for the routing table's NUMA domains."""
    if numa.get("host_nodes", 1) < 2:
        return "one NUMA node: every all-reduce runs flat"
    if len(numa["nodes"]) == 1:
        return (f"pinned to node {numa['nodes'][0]}: ranks pinned to different nodes are NUMA "
                f"domains, whose large all-reduces may take two_level (PYCOMM_TWO_LEVEL)")
    return ("not pinned to one node: large all-reduces stay flat (pin each rank to a node, "
            "numactl or taskset, for two_level)")


def _team_threads(ranks: int):
    """The thread team a rank gets with `ranks` ranks on this host (needs pycomm's runtime)."""
    from pycomm.config import setting

    return setting("team_threads", ranks)


def format_environment(info: Dict[str, Any]) -> str:
    lines = [
        f"pycomm       {info.get('pycomm', '?')} ({Path(__file__).resolve().parents[1]})",
        f"python       {info['python']} ({info['platform']})",
        f"torch        {info.get('torch')}",
    ]
    # Compiled in is not usable: without a GPU, torch's CUDA and NCCL cannot run.
    no_gpu = not info["gpus"]
    if "cuda_runtime" in info:
        cuda = info["cuda_runtime"]
        lines.append(f"CUDA         {cuda or 'none (CPU build)'}"
                     + (" (torch's build; no GPU visible, so nothing runs on CUDA here)"
                        if cuda and no_gpu else ""))
        lines.append(f"NCCL         {info['nccl'] or 'none'}"
                     + (" (compiled into torch; unusable here: it needs a GPU)"
                        if info["nccl"] and no_gpu else ""))
        lines.append("backends     " + ", ".join(
            f"{k} {'yes' if v else 'no'}" + (" (compiled in; needs a GPU)"
                                             if k == "nccl" and v and no_gpu else "")
            for k, v in info["backends"].items()))
    shm = info["shm"]
    if "error" in shm:
        lines.append(f"shm          {shm['dir']}: {shm['error']}")
    else:
        lines.append(f"shm          {shm['dir']}: {human_bytes(shm['free_bytes'])} free of "
                     f"{human_bytes(shm['total_bytes'])}")
    lines.extend(_transport_lines(info.get("transport") or {"error": "not asked"}))
    lines.extend(_single_copy_lines(info.get("single_copy") or {"error": "not asked"}))
    cpus = info["cpus"]
    lines.append(f"CPUs         {cpus['usable']} usable ({cpus['online']} online)")
    numa = info.get("numa") or {}
    if "error" in numa:
        lines.append(f"NUMA         {numa['error']}")
    elif numa:
        lines.append(f"NUMA         {numa['layout']}")
        lines.append(f"this process CPUs {numa['cpus']}, on node(s) "
                     f"{', '.join(map(str, numa['nodes']))}")
        lines.append(f"             {_domain_line(numa)}")
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 2
    team = _try(lambda: _team_threads(ranks), default="?")
    lines.append(f"thread team  {team} thread(s) a rank with {ranks} ranks on this host "
                 f"(PYCOMM_THREADS; docs/settings.md#a-ranks-thread-team)")
    if info["gpus"]:
        for g in info["gpus"]:
            lines.append(f"GPU {g['index']:<8} {g['name']} (sm {g['capability']}, "
                         f"{human_bytes(g['memory_bytes'])})")
        if info["peer_access"]:
            ok = sum(info["peer_access"].values())
            lines.append(f"peer access  {ok}/{len(info['peer_access'])} GPU pairs"
                         + ("" if ok == len(info["peer_access"]) else ": " + ", ".join(
                             k for k, v in info["peer_access"].items() if not v) + " missing"))
        else:
            lines.append("peer access  n/a (one GPU)")
    else:
        lines.append("GPUs         none visible")
    built = info["pycomm_cuda_built"]
    # Compiled is not proven: the CUDA all-reduce has run on a GPU once (docs/cuda.md).
    built = {True: "compiled: bucketing ops and the IPC all-reduce (run on a GPU once, with "
                   "failures left: docs/cuda.md, bench/gpu_check.sh)"
                   + ("; no GPU visible, so they cannot run here" if no_gpu else ""),
             False: "kernels not built (CPU-only build)"}.get(built, built)
    lines.append(f"pycomm CUDA  {built}")
    if info.get("pycomm_cpu_vectors"):
        lines.append(f"pycomm CPU   {info.get('machine', '?')}, vector loops: "
                     f"{info['pycomm_cpu_vectors']}")
    hosts = info.get("hosts") or {}
    if "identity" in hosts:
        lines.append(f"host         {hosts['identity']}"
                     + (" (PYCOMM_HOST_ID)" if os.environ.get("PYCOMM_HOST_ID") else ""))
        for line in hosts.get("layout", []):
            lines.append(f"layout       {line.strip()}")
        for line in hosts.get("plan", []):
            lines.append(f"algorithm    {line}")
    for k, v in info["env"].items():
        lines.append(f"env          {k}={v}")
    for w in info["warnings"]:
        lines.append(f"warning      {w}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- script checks

@dataclass(frozen=True)
class Finding:
    line: int
    code: str
    what: str
    why: str
    fix: str


# torchvision constructors whose models contain BatchNorm layers.
_BN_MODELS = re.compile(r"^(resnet\d+|resnext\w+|wide_resnet\w+|densenet\d+|mobilenet_v[23]\w*|"
                        r"efficientnet_\w+|regnet_\w+|inception_v3|googlenet|vgg\d+_bn|"
                        r"shufflenet_v2\w*|mnasnet\w+)$")
_BN_LAYERS = re.compile(r"^(Lazy)?BatchNorm[123]d$")
_CUDA_STRING = re.compile(r"^cuda(:\d*)?$")


def _call_name(func: ast.expr, aliases: Dict[str, str]) -> str:
    """The name a call resolves to: ``nn.BatchNorm2d`` -> BatchNorm2d; ``DDP`` -> its import."""
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return aliases.get(func.id, func.id)
    return ""


def _const_str(node: Optional[ast.expr]) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    return next((k for k in call.keywords if k.arg == name), None)


class _ScriptFacts(ast.NodeVisitor):
    """One pass over the tree collecting what the checks need."""

    def __init__(self):
        self.aliases: Dict[str, str] = {}
        self.modules: Dict[str, str] = {}     # local name -> module or module.name it stands for
        self.defined: set = set()
        self.calls: List[tuple] = []          # (resolved name, call node)
        self.names: set = set()               # every Name id and Attribute attr
        self.cuda_lines: List[int] = []
        self.imports_pycomm = False
        self.mentions_omp = False             # "OMP_NUM_THREADS" appears in a string
        self.ifs: List[ast.If] = []

    def visit_Import(self, node):
        for a in node.names:
            if a.name == "pycomm" or a.name.startswith("pycomm."):
                self.imports_pycomm = True
            # `import torch.distributed as dist` binds dist; `import torch.distributed` binds torch.
            self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if node.module and (node.module == "pycomm" or node.module.startswith("pycomm.")):
            self.imports_pycomm = True
        for a in node.names:
            if a.asname:
                self.aliases[a.asname] = a.name
            if node.module:
                self.modules[a.asname or a.name] = f"{node.module}.{a.name}"
        self.generic_visit(node)

    def visit_If(self, node):
        self.ifs.append(node)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self.defined.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.defined.add(node.name)
        self.generic_visit(node)

    def visit_Call(self, node):
        name = _call_name(node.func, self.aliases)
        self.calls.append((name, node))
        if isinstance(node.func, ast.Attribute):
            # x.cuda(), torch.cuda.set_device(...)
            if node.func.attr == "cuda" or (
                    node.func.attr == "set_device" and isinstance(node.func.value, ast.Attribute)
                    and node.func.value.attr == "cuda"):
                self.cuda_lines.append(node.lineno)
        if name in ("DistributedDataParallel", "DDP") and _keyword(node, "device_ids"):
            self.cuda_lines.append(node.lineno)
        self.generic_visit(node)

    def visit_Name(self, node):
        self.names.add(self.aliases.get(node.id, node.id))

    def visit_Attribute(self, node):
        self.names.add(node.attr)
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and _CUDA_STRING.match(node.value):
            self.cuda_lines.append(node.lineno)
        if isinstance(node.value, str) and "OMP_NUM_THREADS" in node.value:
            self.mentions_omp = True


# What every rank of a group must call together, by the module that defines it. Point-to-point
# (send, recv, isend, irecv) is meant to differ by rank, and is not here.
_COLLECTIVES = {
    "torch.distributed": {
        "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
        "all_gather_single", "all_gather_object", "all_gather_coalesced", "reduce_scatter",
        "reduce_scatter_tensor", "reduce_scatter_single", "broadcast", "broadcast_object_list",
        "reduce", "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "gather",
        "gather_object", "scatter", "scatter_object_list", "new_group", "destroy_process_group"},
    "pycomm": {"all_reduce", "barrier", "allreduce_gradients", "init", "destroy"},
}
# Functions whose truth says "this is the main process" (rank 0 only).
_MAIN_PROCESS_CALLS = {"is_main_process", "is_master", "is_rank_zero", "is_global_zero"}
_SPAWNERS = {"spawn", "start_processes"}  # torch.multiprocessing's; torchrun sets OMP_NUM_THREADS


def _dotted(expr: ast.expr, modules: Dict[str, str]) -> str:
    """``dist.all_reduce`` -> "torch.distributed.all_reduce" through the script's imports."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return ""
    parts.append(modules.get(expr.id, expr.id))
    return ".".join(reversed(parts))


def _collective(call: ast.Call, modules: Dict[str, str]) -> Optional[str]:
    """The collective `call` makes (as the script spells it), or None."""
    dotted = _dotted(call.func, modules)
    module, _, name = dotted.rpartition(".")
    for home, names in _COLLECTIVES.items():
        if name in names and (module == home or module.startswith(home + ".")):
            return ast.unparse(call.func)
    return None


def _mentions_rank(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        label = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) else None)
        if label is not None and "rank" in label.lower():
            return True
    return False


def _rank_dependent(test: ast.expr) -> bool:
    """Whether an ``if`` test picks some ranks and not others: ``rank == 0``, ``rank != 0``,
    ``local_rank in (-1, 0)``, ``dist.get_rank() % 2``, ``not rank``, ``is_main_process()``.
    ``args.local_rank != -1`` (is this run distributed at all: the same on every rank) is not."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and _call_name(node.func, {}) in _MAIN_PROCESS_CALLS:
            return True
        if isinstance(node, ast.Compare) and _mentions_rank(node):
            for side in [node.left, *node.comparators]:
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and isinstance(v.value, int)
                       and not isinstance(v.value, bool) and v.value >= 0 for v in values):
                    return True
        if isinstance(node, ast.BinOp) and _mentions_rank(node):
            return True  # rank % 2, rank - 1, ...
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _mentions_rank(test.operand)
    return isinstance(test, (ast.Name, ast.Attribute, ast.Call)) and _mentions_rank(test)


def _collectives_in(body: List[ast.stmt], modules: Dict[str, str]) -> Dict[str, int]:
    """The collectives a branch calls, with the line of the first of each; nested function and
    class bodies are left out (what runs there is decided where they are called)."""
    found: Dict[str, int] = {}
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            name = _collective(node, modules)
            if name is not None and node.lineno < found.get(name, 1 << 30):
                found[name] = node.lineno
        todo.extend(ast.iter_child_nodes(node))
    return found


def check_source(source: str, filename: str = "<script>") -> List[Finding]:
    """The common distributed-training mistakes in ``source``, in line order.

    Raises SyntaxError when the source does not parse.
    """
    tree = ast.parse(source, filename=filename)
    facts = _ScriptFacts()
    facts.visit(tree)
    distributed = bool({"DistributedDataParallel", "DDP", "init_process_group",
                        "FullyShardedDataParallel", "FSDP"} & facts.names)
    # A script that never puts anything on CUDA runs its ranks on CPUs: say "rank", not "GPU".
    unit = "GPU" if facts.cuda_lines else "rank"
    findings: List[Finding] = []

    if distributed and not ({"convert_sync_batchnorm", "SyncBatchNorm"} & facts.names):
        for name, call in facts.calls:
            is_layer = _BN_LAYERS.match(name)
            is_model = _BN_MODELS.match(name) and name not in facts.defined
            if not (is_layer or is_model):
                continue
            what = (f"{name} is a BatchNorm layer" if is_layer else
                    f"{name}() builds a model with BatchNorm layers")
            findings.append(Finding(
                call.lineno, "batchnorm-not-synced",
                f"{what}, and the script never calls SyncBatchNorm.convert_sync_batchnorm",
                f"Under DDP each rank normalises with the mean and variance of its own per-{unit} "
                f"batch only; with small per-{unit} batches that is noisy and costs accuracy, and "
                "the running statistics that get saved are rank 0's alone (DDP broadcasts rank "
                "0's buffers).",
                "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before "
                f"DDP(model, ...); keep plain BatchNorm only on purpose, with large per-{unit} "
                "batches."))

    uses_sampler_set_epoch = "set_epoch" in facts.names
    for name, call in facts.calls:
        if name == "DataLoader" and distributed:
            if any(k.arg is None for k in call.keywords):
                continue  # DataLoader(**kwargs): cannot tell what it gets
            sampler = _keyword(call, "sampler") or _keyword(call, "batch_sampler")
            if sampler is None and len(call.args) >= 4:
                sampler = call.args[3]  # DataLoader(dataset, batch_size, shuffle, sampler, ...)
            shuffle = _keyword(call, "shuffle")
            if sampler is None:
                findings.append(Finding(
                    call.lineno, "dataloader-without-distributed-sampler",
                    "DataLoader without sampler= in a script that uses DDP/init_process_group",
                    "Every rank iterates over the whole dataset (in the same order, unless each "
                    f"rank seeds differently): an epoch on N {unit}s processes the data N times "
                    "instead of once, so the per-epoch speedup is lost.",
                    "sampler = DistributedSampler(dataset); DataLoader(dataset, batch_size=..., "
                    "sampler=sampler) without shuffle= (the sampler shuffles), and call "
                    "sampler.set_epoch(epoch) at the start of every epoch."))
            elif shuffle is not None and isinstance(shuffle.value, ast.Constant) \
                    and shuffle.value.value is True:
                findings.append(Finding(
                    call.lineno, "dataloader-sampler-and-shuffle",
                    "DataLoader given both sampler= and shuffle=True",
                    "DataLoader raises ValueError: the sampler option is mutually exclusive "
                    "with shuffle.",
                    "Drop shuffle=True; DistributedSampler(dataset, shuffle=True) (its default) "
                    "shuffles."))
        elif name == "DistributedSampler" and not uses_sampler_set_epoch:
            findings.append(Finding(
                call.lineno, "sampler-without-set-epoch",
                "DistributedSampler is created but set_epoch is never called",
                "The sampler seeds its shuffle with seed + epoch; without set_epoch every epoch "
                "visits the data in the same order.",
                "Call sampler.set_epoch(epoch) at the start of every epoch, before iterating "
                "the DataLoader."))
        elif name == "init_process_group" and facts.cuda_lines:
            backend = _keyword(call, "backend")
            value = _const_str(backend.value) if backend else (
                _const_str(call.args[0]) if call.args else None)
            if value is not None and value.strip().lower() == "gloo":
                findings.append(Finding(
                    call.lineno, "gloo-with-cuda",
                    f'init_process_group("gloo") in a script that puts models or tensors on '
                    f"CUDA (line {min(facts.cuda_lines)})",
                    "gloo all-reduces CUDA tensors by copying them to host memory and reducing "
                    "on the CPU over TCP, far slower than NCCL over NVLink or InfiniBand; a "
                    "32-GPU ResNet-50 run on gloo spent 45% of each step there (pycomm predict "
                    "--preset resnet50-32gpu-gloo-ethernet).",
                    'init_process_group("nccl") with one GPU per process '
                    '(torch.cuda.set_device(local_rank)), or backend="cpu:gloo,cuda:nccl" when '
                    "CPU tensors need collectives too."))

    findings.extend(_pycomm_and_cpu_findings(facts, distributed))
    findings.sort(key=lambda f: (f.line, f.code))
    return findings


def _backend_string(call: ast.Call) -> Optional[str]:
    backend = _keyword(call, "backend")
    return _const_str(backend.value) if backend else (
        _const_str(call.args[0]) if call.args else None)


def _pycomm_and_cpu_findings(facts: _ScriptFacts, distributed: bool) -> List[Finding]:
    """The mistakes of pycomm's users and of CPU training: a collective only some ranks
    make, the pycomm backend named but never registered, ranks that oversubscribe the cores."""
    findings: List[Finding] = []
    for node in facts.ifs:
        if not _rank_dependent(node.test):
            continue
        taken, other = _collectives_in(node.body, facts.modules), \
            _collectives_in(node.orelse, facts.modules)
        condition = ast.unparse(node.test)
        for branch, rest, when in ((taken, other, condition), (other, taken, f"not ({condition})")):
            for name, line in sorted(branch.items(), key=lambda kv: kv[1]):
                if name in rest:
                    continue  # both branches make it: every rank does
                findings.append(Finding(
                    line, "collective-under-rank-condition",
                    f"{name}(...) runs only on the ranks where {when} (the if on line "
                    f"{node.lineno})",
                    "Every rank of a group must make the same collectives in the same order; "
                    "the other ranks never enter this one. On gloo the ranks that do wait until "
                    "the group's timeout (30 minutes by default). On pycomm they raise "
                    "pycomm.CollectiveMismatch as soon as another rank enters a different "
                    "collective, or pycomm.CommTimeout naming the ranks that never arrived at "
                    "the timeout.",
                    f"Call {name} on every rank, outside the if, and keep only those ranks' "
                    "own work inside (all-reduce the loss on every rank, then print it on rank "
                    "0). Messages between particular ranks are send/recv, which may differ by "
                    "rank."))
    for name, call in facts.calls:
        if name != "init_process_group":
            continue
        backend = _backend_string(call)
        if backend and "pycomm" in backend.lower() and not facts.imports_pycomm:
            findings.append(Finding(
                call.lineno, "pycomm-backend-not-imported",
                f"init_process_group({backend!r}) in a script that never imports pycomm",
                "Importing pycomm is what registers the \"pycomm\" backend with "
                "torch.distributed; without it init_process_group raises that the backend is "
                "invalid.",
                "import pycomm (before init_process_group), even if the script calls nothing "
                "of it."))
    if distributed and not facts.cuda_lines and not (
            {"set_num_threads", "OMP_NUM_THREADS"} & facts.names or facts.mentions_omp):
        for name, call in facts.calls:
            if name in _SPAWNERS:
                findings.append(Finding(
                    call.lineno, "cpu-ranks-oversubscribe-cores",
                    f"{ast.unparse(call.func)} starts CPU ranks, and the script never limits "
                    "their threads (torch.set_num_threads or OMP_NUM_THREADS)",
                    "Each rank's intra-op thread pool takes every core of the host, so N ranks "
                    "run N times as many compute threads as there are cores: they preempt each "
                    "other, every step waits for the slowest rank, and the ranks' "
                    "communication (pycomm's shared-memory waits, gloo's sockets) loses its "
                    "core too. torchrun sets OMP_NUM_THREADS=1 when it starts several ranks; "
                    "mp.spawn sets nothing.",
                    "In each rank, before any compute: torch.set_num_threads(max(1, "
                    "len(os.sched_getaffinity(0)) // ranks_on_this_host)); or launch with "
                    "torchrun --nproc_per_node N."))
                break
    return findings


def check_script(path: Union[str, Path]) -> List[Finding]:
    """The common mistakes in the Python file at ``path`` (read, parsed, never executed)."""
    path = Path(path)
    return check_source(path.read_text(encoding="utf-8"), str(path))


def format_findings(path: str, findings: List[Finding]) -> str:
    if not findings:
        return (f"{path}: no common mistakes found (checked: BatchNorm without SyncBatchNorm, "
                "DataLoader without DistributedSampler, DistributedSampler without set_epoch, "
                "gloo with CUDA, a collective only some ranks make, the pycomm backend without "
                "import pycomm, CPU ranks with unlimited threads)")
    lines = [f"{path}: {len(findings)} finding{'s' if len(findings) != 1 else ''}"]
    for f in findings:
        lines.append(f"  {path}:{f.line}: [{f.code}] {f.what}")
        lines.append(f"      why: {f.why}")
        lines.append(f"      fix: {f.fix}")
    return "\n".join(lines)


def findings_as_dicts(findings: List[Finding]) -> List[Dict[str, Any]]:
    return [asdict(f) for f in findings]
