"""pycomm doctor: the environment as it matters for distributed training (this file), and the
common mistakes of a training script found by reading it (script_checks.py, whose names it
passes on).
"""
from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from typing import Any, Dict, List
from .._runtime_missing import import_runtime
from ..host_cpus import placement, usable_cores
from ..units import human_bytes
from .script_checks import (Finding, check_script, check_source, findings_as_dicts,
                            format_findings)

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
    from .._version import __version__  # torch-free, there even when the runtime is not

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
        _C = import_runtime("pycomm.cuda_built", uses="needs")
        built = bool(_C.cuda_built())
        vectors = _C.cpu_vector_path()
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
    from .. import _C, config, rendezvous

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
    from .. import _C, config

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
    from ..rendezvous import host_identity
    from ..topology import expected_layout

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
    from ..config import setting

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
