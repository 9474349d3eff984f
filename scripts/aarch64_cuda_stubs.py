"""Stand-ins for the CUDA libraries that PyPI's aarch64 torch wheel needs, so that
it loads under qemu-user on a host without them (scripts/aarch64_python.sh).

PyPI's aarch64 torch (2.11 and newer) is the CUDA build: libtorch_cpu and
friends name libcudart, libcublas, libcudnn, NCCL... as needed libraries, and
PyPI carries no aarch64 builds of those here. This writes, for each needed
library that neither the wheel nor the Arm root provides, a shared library of
the same name that defines every symbol torch takes from it (with its symbol
version) and fails every call: cudaGetDeviceCount says 0 devices, everything
else returns an error code. torch then reports no GPU and runs on the CPU.

    python3 scripts/aarch64_cuda_stubs.py SITE ROOT OUT
SITE: where the wheel is unpacked; ROOT: the Arm root (Debian's arm64
packages); OUT: the folder for the stand-ins (put it on LD_LIBRARY_PATH).
"""
import collections
import os
import re
import subprocess
import sys


def readelf(*args):
    """readelf's output; empty for what is no ELF file (a linker script, a dangling link)."""
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True).stdout


def dynamic_symbols(path):
    """(type, section, name[@version], binding) of each dynamic symbol."""
    for line in readelf("--dyn-syms", path).splitlines():
        p = line.split()
        if len(p) >= 8 and p[0].endswith(":"):
            yield p[3], p[6], p[7], p[4]


def needed(path):
    return re.findall(r"Shared library: \[(.*?)\]", readelf("-d", path))


def stub_source(symbols):
    """C for one stand-in: symbol -> type."""
    lines = ['static const char message[] = "a stand-in for a CUDA library: no CUDA here";']
    for name, kind in sorted(symbols.items()):
        if kind == "OBJECT":
            lines.append(f"char {name}[4096] __attribute__((aligned(64)));")
        elif name.endswith("GetDeviceCount"):
            lines.append(f"int {name}(int *n) {{ if (n) *n = 0; return 100; }}")
        elif re.search(r"(ErrorString|ErrorName)$", name):
            lines.append(f"const char *{name}(void) {{ return message; }}")
        elif name in ("cudaGetLastError", "cudaPeekAtLastError"):
            lines.append(f"int {name}(void) {{ return 0; }}")
        elif name.endswith(("DriverGetVersion", "RuntimeGetVersion")):
            lines.append(f"int {name}(int *v) {{ if (v) *v = 0; return 0; }}")
        elif name.startswith("__cuda"):
            lines.append(f"void *{name}(void) {{ return 0; }}")
        else:
            lines.append(f"long {name}() {{ return 100; }}")  # 100: cudaErrorNoDevice
    return "\n".join(lines) + "\n"


def main(site, root, out):
    lib = os.path.join(site, "torch", "lib")
    torch_dir = os.path.join(site, "torch")
    files = [os.path.join(lib, f) for f in os.listdir(lib) if ".so" in f]
    files += [os.path.join(torch_dir, f) for f in os.listdir(torch_dir)
              if f.startswith("_C") and f.endswith(".so")]
    arm_dirs = [os.path.join(root, "usr/lib/aarch64-linux-gnu"), os.path.join(root, "lib/aarch64-linux-gnu")]
    present = set(os.listdir(lib)) | {f for d in arm_dirs if os.path.isdir(d) for f in os.listdir(d)}
    missing = {n for f in files for n in needed(f) if n not in present}
    missing.add("libcuda.so.1")  # the driver, opened later with dlopen

    # Which needed file each symbol version belongs to.
    version_file = {}
    for f in files:
        current = None
        for line in readelf("-V", f).splitlines():
            m = re.search(r"File: (\S+)", line)
            if m:
                current = m.group(1)
                continue
            m = re.search(r"Name: (\S+)", line)
            if m and current:
                version_file[m.group(1)] = current
    # What the wheel, the C and C++ runtimes and Python define already.
    providers = files + [os.path.join(d, f) for d in arm_dirs if os.path.isdir(d) for f in os.listdir(d)
                         if re.match(r"(lib(c|m|stdc\+\+|gcc_s|gomp|pthread|dl|rt|z)\.so|ld-linux)", f)]
    providers.append(os.path.join(root, "usr/bin/python3.11"))
    defined = {name.split("@")[0] for f in providers
               for _, section, name, _ in dynamic_symbols(f) if section != "UND"}

    wanted = collections.defaultdict(dict)  # library -> {symbol: (type, version)}
    for f in files:
        for kind, section, name, binding in dynamic_symbols(f):
            if section != "UND" or not name or binding == "WEAK":
                continue
            if "@" in name:
                symbol, version = name.split("@", 1)
                version = version.split()[0]
                if version_file.get(version) in missing:
                    wanted[version_file[version]][symbol] = (kind, version)
            elif name not in defined and kind in ("FUNC", "OBJECT", "NOTYPE"):
                wanted["libcudart.so.13"][name] = (kind, None)  # unversioned: the runtime's

    os.makedirs(out, exist_ok=True)
    for name in sorted(missing):
        symbols = wanted.get(name, {})
        source = os.path.join(out, name + ".c")
        with open(source, "w") as f:
            f.write(stub_source({s: kind for s, (kind, _) in symbols.items()}))
        by_version = collections.defaultdict(list)
        for s, (_, version) in symbols.items():
            by_version[version or name].append(s)
        script = os.path.join(out, name + ".map")
        with open(script, "w") as f:
            f.write("".join(f"{v} {{\n global:\n" + "".join(f"  {s};\n" for s in ss) + " local: *;\n};\n"
                            for v, ss in by_version.items()) or f"{name} {{ local: *; }};\n")
        subprocess.run(["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-O1", "-w", "-fno-builtin",
                        "-o", os.path.join(out, name), source, f"-Wl,-soname,{name}",
                        f"-Wl,--version-script={script}"], check=True)
        print(f"aarch64_cuda_stubs: {name}: {len(symbols)} symbols")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
