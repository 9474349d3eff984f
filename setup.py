"""Builds pycomm's native extension, pycomm._C: the core, the c10d backend, the
binding, and the settings and routing tables the Python tools read.

Its sources and C++ flags are csrc/sources_and_flags.txt's, which CMakeLists.txt
reads too. The CPU sources are always built. The CUDA sources are built when a
CUDA toolkit is found, with or without a GPU; PYCOMM_CUDA=0 skips them.
"""
import glob
import os
import platform
import re
import shutil

from setuptools import find_packages, setup

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


def build_list(*key):
    """The words after `key` on each line of csrc/sources_and_flags.txt that begins with it."""
    words = []
    with open(os.path.join(ROOT, "csrc", "sources_and_flags.txt")) as f:
        for line in f:
            line_words = line.split("#", 1)[0].split()
            if tuple(line_words[:len(key)]) == key:
                words += line_words[len(key):]
    return words


def sources(key):
    return [path for pattern in build_list(key)
            for path in sorted(glob.glob(pattern, root_dir=ROOT))]


def target_flags(march, machine):
    """The flags for PYCOMM_MARCH on this machine (csrc/sources_and_flags.txt says why)."""
    if march in ("native", "portable"):
        return build_list("march", march, machine)
    return [f"-march={march}"] if march else []


cxx_flags = build_list("cxxflags") + target_flags(os.environ.get("PYCOMM_MARCH", "native"),
                                                  platform.machine())
library_sources = sources("core") + sources("glue")

define_macros = []
extra = {"cxx": cxx_flags}
if WITH_CUDA:
    define_macros.append(("PYCOMM_WITH_CUDA", "1"))
    extra["nvcc"] = ["-O3", "-std=c++20", "-lineinfo"]
    ext = CUDAExtension("pycomm._C", library_sources + sources("cuda"),
                        define_macros=define_macros, extra_compile_args=extra)
else:
    ext = CppExtension("pycomm._C", library_sources,
                       define_macros=define_macros, extra_compile_args=extra)

# scripts/setup.sh builds in place first, then installs the package editable
# with PYCOMM_SKIP_BUILD=1 so that pip does not build everything a second time.
skip_build = os.environ.get("PYCOMM_SKIP_BUILD") == "1"

setup(
    packages=find_packages(include=["pycomm", "pycomm.*"]),
    ext_modules=[] if skip_build else [ext],
    cmdclass={"build_ext": BuildExtension},
)
