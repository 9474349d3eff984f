"""What the compiler made of the CUDA all-reduce kernels, read back from the
extension pycomm runs (pycomm._C) with cuobjdump: no GPU needed, so these run
in CI wherever the CUDA sources were built.

- Resources (the sm_90 SASS, `cuobjdump --dump-resource-usage`): every kernel
  within the register cap its launch bounds promise, no stack frame (the
  peers' pointers stay out of local memory), and blocks small enough that the
  launch's block count keeps 2, 4 and 8 ranks' blocks resident on an H200 at
  once: they spin-wait for each other, so a block that cannot be scheduled
  stalls every rank until the timeout.
- Memory order (the compute_90 PTX, `cuobjdump -ptx`): every ordered flag
  access of the signal protocol is system scope (the flags live in peers'
  device memory and the status in host-mapped memory, which a narrower scope
  does not order), polls are relaxed with one acquire load once a flag is
  there, and the one exception is the claim of a rank's timeout record: a
  device-scope compare-and-swap on a word of the rank's own pad, since
  host-device atomics on host-mapped memory are not promised on a PCIe host.
  No system-scope compare-and-swap is left.
"""
from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shutil
import subprocess

import pytest

import pycomm
from pycomm import _C

pytestmark = [pytest.mark.fast,
              pytest.mark.skipif(not pycomm.cuda_built(), reason="the CUDA sources were not built")]

ALGORITHMS = ("one_shot_kernel", "two_shot_kernel", "ring_kernel")
# 3 algorithms x (8 dtypes x 5 ops, less avg of the 4 integer types).
KERNELS_PER_ARCH = 3 * (8 * 5 - 4)

# sm_90 (H100, H200), from the CUDA C++ Programming Guide's table of compute
# capabilities and the occupancy calculator: 64 K 32-bit registers, 2048
# threads, 32 blocks and 228 KiB of shared memory per SM (1 KiB of it reserved
# per block); registers are allocated per warp in units of 256.
SM90 = dict(registers=65536, threads=2048, blocks=32, shared=228 << 10, shared_reserved=1 << 10,
            register_unit=256)
H200_SMS = 132
REGISTER_CAP = 64           # __launch_bounds__(kAllReduceThreads, 2) in cuda_all_reduce.cu
THREADS = _C.cuda_all_reduce_threads()


def _cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "cuobjdump"), os.X_OK):
            return os.path.join(home, "bin", "cuobjdump")
    # NVIDIA's wheel (scripts/setup.sh installs it where the toolkit lacks it).
    try:
        files = importlib.metadata.files("nvidia-cuda-cuobjdump") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "cuobjdump" and os.access(f.locate(), os.X_OK):
            return str(f.locate())
    pytest.fail("cuobjdump not found: install the CUDA toolkit's, or `pip install nvidia-cuda-cuobjdump` "
                "(scripts/setup.sh does)")


@functools.lru_cache(maxsize=None)
def _dump(flag: str) -> str:
    done = subprocess.run([_cuobjdump(), flag, _C.__file__], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _algorithm(name: str) -> str | None:
    return next((a for a in ALGORITHMS if a in name), None)


@functools.lru_cache(maxsize=None)
def resources(arch: str = "sm_90") -> dict[str, dict[str, int]]:
    """Kernel name -> REG, STACK, SHARED, LOCAL for the all-reduce kernels of `arch`."""
    out, current_arch, function = {}, None, None
    for line in _dump("--dump-resource-usage").splitlines():
        if m := re.match(r"\s*arch = (sm_\d+)", line):
            current_arch = m.group(1)
        elif m := re.match(r"\s*Function (\S+):", line):
            function = m.group(1)
        elif (m := re.match(r"\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)) and function:
            if current_arch == arch and _algorithm(function):
                out[function] = dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, m.groups())))
            function = None
    return out


def blocks_per_sm(registers: int, shared: int, threads: int = THREADS, sm: dict = SM90) -> int:
    """How many blocks of this kernel one SM holds at once."""
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // sm["register_unit"]) * sm["register_unit"]
    by_registers = sm["registers"] // (per_warp * warps) if registers else sm["blocks"]
    by_threads = sm["threads"] // threads
    by_shared = sm["shared"] // (shared + sm["shared_reserved"])
    return min(by_registers, by_threads, by_shared, sm["blocks"])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_all_reduce_kernel_is_built(arch):
    got = resources(arch)
    if not got and arch not in _dump("--dump-resource-usage"):
        pytest.skip(f"this build has no {arch} code (TORCH_CUDA_ARCH_LIST)")
    counts = {a: sum(1 for k in got if _algorithm(k) == a) for a in ALGORITHMS}
    assert sum(counts.values()) == KERNELS_PER_ARCH, counts


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_registers_within_the_cap_and_no_stack_frame(arch):
    got = resources(arch)
    if not got:
        pytest.skip(f"this build has no {arch} code (TORCH_CUDA_ARCH_LIST)")
    over = {k: r["REG"] for k, r in got.items() if r["REG"] > REGISTER_CAP}
    assert not over, f"{len(over)} kernels over {REGISTER_CAP} registers a thread: {over}"
    framed = {k: (r["STACK"], r["LOCAL"]) for k, r in got.items() if r["STACK"] or r["LOCAL"]}
    assert not framed, f"{len(framed)} kernels with a stack frame or local memory (bytes): {framed}"


@pytest.mark.parametrize("world", [2, 4, 8])
def test_all_ranks_blocks_fit_on_an_h200_at_once(world):
    got = resources("sm_90")
    if not got:
        pytest.skip("this build has no sm_90 code")
    fit = min(blocks_per_sm(r["REG"], r["SHARED"]) for r in got.values())
    per_rank = _C.cuda_max_blocks_per_rank(world, H200_SMS)
    print(f"H200, {world} ranks: {per_rank} blocks a rank, {fit} blocks an SM by the kernels' "
          f"registers and shared memory: {world * per_rank} of {fit * H200_SMS} resident")
    assert per_rank >= 1
    assert world * per_rank <= fit * H200_SMS


def test_blocks_per_sm_arithmetic():
    # 512 threads at 64 registers: 32 K registers a block, two an SM; at 32, four (threads bound).
    assert blocks_per_sm(64, 0, 512) == 2
    assert blocks_per_sm(32, 0, 512) == 4
    assert blocks_per_sm(65, 0, 512) == 1   # 72 registers after rounding to the unit: one block
    assert blocks_per_sm(16, 100 << 10, 256) == 2


def _ptx_entries() -> dict[str, str]:
    """Entry name -> body, for the all-reduce kernels of the compute_90 PTX."""
    text = _dump("-ptx")
    entries, name, body, depth = {}, None, [], 0
    for line in text.splitlines():
        if m := re.match(r"\s*(?:\.visible\s+)?\.entry\s+(\S+?)\(", line):
            name, body, depth = m.group(1), [], 0
        elif name is not None:
            body.append(line)
            # The body's braces nest (inline assembly, vector operands): it
            # ends where they balance again.
            opened = depth > 0 or "{" in line
            depth += line.count("{") - line.count("}")
            if opened and depth == 0:
                if _algorithm(name):
                    entries[name] = "\n".join(body)
                name = None
    return entries


# An ordered memory operation: ld/st/atom/red with a memory-order qualifier.
ORDERED = re.compile(r"\b(ld|st|atom|red)\.(?:[a-z0-9_]+\.)*?(relaxed|acquire|release|acq_rel|volatile)"
                     r"((?:\.[a-z0-9_]+)*)")


def narrow_accesses(body: str) -> list[str]:
    """The ordered memory operations in `body` that lack system scope."""
    return [m.group(0) for m in ORDERED.finditer(body) if not re.search(r"\.sys\b", m.group(0))]


def is_cas(access: str) -> bool:
    return access.startswith("atom.") and re.search(r"\.cas\b", access) is not None


def is_claim(access: str) -> bool:
    """The timeout record's claim: a compare-and-swap at device (gpu) scope."""
    return is_cas(access) and re.search(r"\.gpu\b", access) is not None


def test_the_scope_check_tells_a_narrow_scope():
    body = ("st.release.sys.global.b64 [%rd1], %rd2;\n"
            "ld.acquire.gpu.global.b64 %rd3, [%rd4];\n"
            "atom.acq_rel.sys.global.cas.b32 %r1, [%rd5], %r2, %r3;\n"
            "ld.relaxed.cta.global.b32 %r4, [%rd6];\n"
            "atom.cas.relaxed.gpu.b32 %r9, [%rd8], %r10, %r11;\n"
            "ld.global.nc.v4.u32 {%r5, %r6, %r7, %r8}, [%rd7];\n")
    narrow = narrow_accesses(body)
    assert narrow == ["ld.acquire.gpu.global.b64", "ld.relaxed.cta.global.b32", "atom.cas.relaxed.gpu.b32"]
    assert [a for a in narrow if is_claim(a)] == ["atom.cas.relaxed.gpu.b32"]
    assert [m.group(0) for m in ORDERED.finditer(body) if is_cas(m.group(0)) and not is_claim(m.group(0))] == \
        ["atom.acq_rel.sys.global.cas.b32"]


def test_signal_flags_are_system_scope_in_the_ptx():
    if ".target sm_90" not in _dump("-ptx"):
        pytest.skip("this build embeds no compute_90 PTX (TORCH_CUDA_ARCH_LIST without 9.0+PTX)")
    entries = _ptx_entries()
    assert len(entries) == KERNELS_PER_ARCH, len(entries)
    for name, body in entries.items():
        accesses = [m.group(0) for m in ORDERED.finditer(body)]
        narrow = [a for a in narrow_accesses(body) if not is_claim(a)]
        assert not narrow, f"{name}: ordered accesses without system scope: {sorted(set(narrow))}"
        assert re.search(r"\bst\.release\.sys\b", body), f"{name}: no system-scope release store"
        assert re.search(r"\bld\.relaxed\.sys\b", body), f"{name}: no relaxed system-scope poll"
        assert re.search(r"\bld\.acquire\.sys\b", body), f"{name}: no system-scope acquire load"
        assert any(is_claim(a) for a in accesses), f"{name}: no device-scope claim of the timeout record"
        system_cas = sorted({a for a in accesses if is_cas(a) and not is_claim(a)})
        assert not system_cas, f"{name}: a compare-and-swap beyond the device-scope claim: {system_cas}"
        fences = sorted(set(re.findall(r"\bfence\.[a-z0-9_.]+", body)))
        assert all(re.search(r"\.sys\b", f) for f in fences), f"{name}: a fence below system scope: {fences}"
