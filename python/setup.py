"""Builds optitpu._core, the CPython extension (stable ABI, CPython >= 3.11), against liboptitpu.

Where liboptitpu comes from, first match wins:

1. OPTITPU_BUILD_DIR: a CMake build tree of this repository (its liboptitpu.so, found at run time
   through an rpath to that directory; the headers from the repository's include/).
2. OPTITPU_PREFIX, else `pkg-config optitpu`: an installed library (`cmake --install`).
3. Otherwise the repository around this folder is configured and built with CMake (Release, no
   tests, no MPI) into build/cmake-optitpu, and its static archive is linked into the extension,
   which then needs no liboptitpu.so (OpenBLAS, libcrypto and jansson stay shared libraries).
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out.stdout)


def split_flags(flags):
    inc = [f[2:] for f in flags if f.startswith("-I")]
    libdirs = [f[2:] for f in flags if f.startswith("-L")]
    libs = [f[2:] for f in flags if f.startswith("-l")]
    return inc, libdirs, libs


def locate():
    """(include_dirs, library_dirs, libraries, runtime_library_dirs, extra_objects)"""
    build = os.environ.get("OPTITPU_BUILD_DIR")
    if build:
        build = str(Path(build).resolve())
        if not Path(build, "liboptitpu.so").exists():
            raise SystemExit(f"OPTITPU_BUILD_DIR={build} has no liboptitpu.so (build it first)")
        # the tree's own sources (this folder may be a copy made elsewhere)
        src = REPO
        for line in Path(build, "CMakeCache.txt").read_text().splitlines():
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                src = Path(line.split("=", 1)[1])
        return [str(src / "include")], [build], ["optitpu"], [build], []
    prefix = os.environ.get("OPTITPU_PREFIX")
    if prefix:
        pc = [p for p in Path(prefix).glob("lib*/pkgconfig")] + [Path(prefix, "lib/pkgconfig")]
        os.environ["PKG_CONFIG_PATH"] = ":".join(
            [str(p) for p in pc] + [os.environ.get("PKG_CONFIG_PATH", "")])
    flags = pkg_config("--cflags", "--libs", "optitpu")
    if flags:
        inc, libdirs, libs = split_flags(flags)
        return inc, libdirs, libs, libdirs, []
    if not (REPO / "CMakeLists.txt").exists() or not shutil.which("cmake"):
        raise SystemExit("liboptitpu not found: set OPTITPU_BUILD_DIR or OPTITPU_PREFIX, install "
                         "it (pkg-config optitpu), or build from the repository (needs cmake)")
    out = HERE / "build" / "cmake-optitpu"
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
                    "-DOT_BUILD_TESTS=OFF", "-DOT_WITH_MPI=OFF"], check=True)
    subprocess.run(["cmake", "--build", str(out), "--target", "optitpu_static", "-j",
                    str(os.cpu_count() or 2)], check=True)
    # the archive's own dependencies, as its pkg-config file lists them for static linking
    os.environ["PKG_CONFIG_PATH"] = str(out) + ":" + os.environ.get("PKG_CONFIG_PATH", "")
    deps = pkg_config("--static", "--libs", "optitpu") or []
    _, libdirs, libs = split_flags(deps)
    libs = [lib for lib in libs if lib != "optitpu"]
    return [str(REPO / "include")], libdirs, libs, [], [str(out / "liboptitpu.a")]


inc, libdirs, libs, rpath, objs = locate()
ext = Extension(
    "optitpu._core",
    sources=["src/_core.c"],
    include_dirs=inc,
    library_dirs=libdirs,
    libraries=libs,
    runtime_library_dirs=rpath,
    extra_objects=objs,
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Wshadow", "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type", "-fvisibility=hidden"],
    define_macros=[("Py_LIMITED_API", "0x030B0000")],
    py_limited_api=True,
)
setup(ext_modules=[ext], options={"bdist_wheel": {"py_limited_api": "cp311"}})
