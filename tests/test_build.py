"""The build (setup.py, from csrc/sources_and_flags.txt): pycomm/ holds one compiled
extension, pycomm._C, and it exports the library alone, none of the main() functions of
the programs beside it (the native tests, csrc/core/bench/)."""
import shutil
import subprocess
from pathlib import Path

import pytest

import pycomm

pytestmark = pytest.mark.fast

PACKAGE = Path(pycomm.__file__).resolve().parent


def compiled_extensions():
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".so", ".pyd"))


def test_the_only_compiled_extension_is_C():
    found = compiled_extensions()
    assert [p.name.split(".")[0] for p in found] == ["_C"], (
        f"compiled extensions in {PACKAGE}: {[p.name for p in found]}; any other than "
        f"_C is left from an older build: delete it")


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_the_extension_exports_no_main():
    [extension] = [p for p in compiled_extensions() if p.name.startswith("_C.")]
    listing = subprocess.run(["nm", "-D", "--defined-only", str(extension)], check=True,
                             capture_output=True, text=True).stdout
    symbols = {line.split()[-1] for line in listing.splitlines() if line.strip()}
    assert "PyInit__C" in symbols  # nm read the extension's dynamic symbols
    assert "main" not in symbols, f"{extension.name} exports main(): a program's source is in the build"
