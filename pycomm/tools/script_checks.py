"""The common mistakes of a distributed training script, found by reading it (``ast``; the
script is never run): the script half of ``pycomm doctor``.
"""
from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

__all__ = ["Finding", "check_script", "check_source", "findings_as_dicts", "format_findings"]


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
            value = _backend_string(call)
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
