"""Builds pycomm's native extensions: pycomm._C (the core, the c10d backend and
the binding) and pycomm._tables (the settings and routing tables, torch-free).

The CPU sources are always built. The CUDA sources are built when a CUDA
toolkit is found, with or without a GPU; PYCOMM_CUDA=0 skips them.
"""
import glob
import os
import platform
import re
import shutil
import subprocess

from setuptools import Extension, find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _is_cuda_home(path):
    return bool(path) and os.path.isfile(os.path.join(path, "include", "cuda_runtime.h")) and \
        os.access(os.path.join(path, "bin", "nvcc"), os.X_OK)


def find_cuda_home():
    """The toolkit's real home, also when `nvcc` on the PATH is a wrapper script.

    torch looks at dirname(dirname(which nvcc)), which for a wrapper in
    /usr/local/bin is /usr/local: wrong. So look inside the wrapper too.
    """
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = os.path.realpath(nvcc)
        candidates.append(os.path.dirname(os.path.dirname(real)))
        try:
            with open(real, "rb") as f:
                head = f.read(4096)
            if head.startswith(b"#!"):  # a script: the paths it runs
                for m in re.finditer(rb"(/[\w./+-]*?)/bin/nvcc", head):
                    candidates.append(m.group(1).decode())
        except OSError:
            pass
    candidates.append("/usr/local/cuda")
    candidates.extend(sorted(glob.glob("/usr/local/cuda-*"), reverse=True))
    for c in candidates:
        if _is_cuda_home(c):
            return os.path.realpath(c)
    return None


import torch  # noqa: E402

# Why the CUDA sources are skipped, or None when they are built.
cuda_home = find_cuda_home()
if os.environ.get("PYCOMM_CUDA", "1") == "0":
    NO_CUDA = "PYCOMM_CUDA=0"
elif torch.version.cuda is None:
    NO_CUDA = f"torch {torch.__version__} is a CPU build"
elif cuda_home is None:
    NO_CUDA = "no CUDA toolkit found"
else:
    NO_CUDA = None
    # Must be set before torch.utils.cpp_extension is imported: it reads
    # CUDA_HOME once, at import.
    os.environ["CUDA_HOME"] = cuda_home
WITH_CUDA = NO_CUDA is None

from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402

if WITH_CUDA and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
    # With no GPU to ask, build for Ampere and Hopper (A100, H100/H200), with
    # Hopper's PTX too: newer GPUs compile it at load, and
    # tests/test_cuda_codegen.py reads the memory order of the flags from it.
    if not torch.cuda.is_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0+PTX"

# One line that scripts/setup.sh shows (it keeps the rest of the log): why the
# CUDA sources are compiled, or not.
if WITH_CUDA:
    gpu = ("a GPU is visible" if torch.cuda.is_available()
           else "no GPU is visible, so they will not run here")
    print(f"pycomm-build: compiling the CUDA sources too, because a CUDA toolkit was found at "
          f"{os.environ['CUDA_HOME']} ({gpu}); PYCOMM_CUDA=0 skips them", flush=True)
else:
    print(f"pycomm-build: CPU sources only ({NO_CUDA})", flush=True)

# The core's tables (routing.cpp), then its layers as folders (transport/,
# collectives/, kernels/); its native tests build under CMake only.
core_sources = sorted(glob.glob("csrc/core/*.cpp")) + \
    sorted(f for f in glob.glob("csrc/core/*/*.cpp") if "/tests/" not in f)
torch_sources = sorted(glob.glob("csrc/torch/*.cpp"))
cuda_sources = sorted(glob.glob("csrc/cuda/*.cu")) if WITH_CUDA else []


def arch_flags(machine, march):
    """The target flag for PYCOMM_MARCH on this machine. "native" (the default:
    built where it runs, like every torch extension) tunes for this CPU, with
    -mcpu on Arm, where it sets the architecture and the tuning together.
    "portable" is the oldest CPU that still takes pycomm's vector loops
    (csrc/core/kernels/float_lanes.h): x86-64-v3 (AVX2 and F16C, 2013 on) and
    armv8-a (NEON, which every AArch64 CPU has). Any other value goes to -march
    as it is (e.g. x86-64 for no vector loops, armv8.2-a+sve)."""
    arm = machine in ("aarch64", "arm64")
    if march == "native":
        return ["-mcpu=native"] if arm else ["-march=native"]
    if march == "portable":
        if arm:
            return ["-march=armv8-a"]
        if machine in ("x86_64", "AMD64"):
            return ["-march=x86-64-v3"]
        return []  # an architecture pycomm has no vector loops for: the compiler's default
    return [f"-march={march}"]


target = arch_flags(platform.machine(), os.environ.get("PYCOMM_MARCH", "native"))
cxx_flags = ["-O3", "-std=c++20", *target, "-ffp-contract=off", "-Wall", "-Wno-unknown-pragmas"]
define_macros = []
extra = {"cxx": cxx_flags}
if WITH_CUDA:
    define_macros.append(("PYCOMM_WITH_CUDA", "1"))
    extra["nvcc"] = ["-O3", "-std=c++20", "-lineinfo"]
    ext = CUDAExtension("pycomm._C", core_sources + torch_sources + cuda_sources,
                        define_macros=define_macros, extra_compile_args=extra)
else:
    ext = CppExtension("pycomm._C", core_sources + torch_sources,
                       define_macros=define_macros, extra_compile_args=extra)

# The tables for Python with no torch (the scaling model, `pycomm doctor`):
# the CPython API and the core's routing.cpp only.
tables = Extension("pycomm._tables", ["csrc/tables/tables_module.cpp", "csrc/core/routing.cpp"],
                   extra_compile_args=["-O2", "-std=c++20", "-Wall"], language="c++")


class BuildEachInItsFolder(BuildExtension):
    """torch's ninja build writes build/temp.*/build.ninja for each extension:
    a folder of its own keeps _C's (scripts/check_torch_headers.sh reads its flags)."""

    def build_extension(self, ext):
        shared = self.build_temp
        self.build_temp = os.path.join(shared, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = shared


# scripts/setup.sh builds in place first, then installs the package editable
# with PYCOMM_SKIP_BUILD=1 so that pip does not build everything a second time.
skip_build = os.environ.get("PYCOMM_SKIP_BUILD") == "1"

setup(
    packages=find_packages(include=["pycomm", "pycomm.*"]),
    ext_modules=[] if skip_build else [tables, ext],
    cmdclass={"build_ext": BuildEachInItsFolder},
)
