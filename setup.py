"""Builds the _scaleinv extension for `pip install .` / `pip wheel .` with CMake (the project's one
build description): the torch-free brain only (SCALEINV_BRAIN_ONLY=ON), for the Python running pip.
Needs cmake, a C++20 compiler and the brain's Debian packages (libfmt-dev, nlohmann-json3-dev,
libtomlplusplus-dev, libsqlite3-dev, libre2-dev, libcsv-dev); scripts/setup.sh installs them. pybind11 comes from
the build environment (PyPI's, through pyproject.toml) or, where that has none, Debian's pybind11-dev.
Metadata is in pyproject.toml."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        cmake = shutil.which("cmake")
        if cmake is None:
            sys.exit("scaleinv: cmake is not installed (fix: apt-get install cmake, or run scripts/setup.sh)")
        # One build folder per interpreter ABI, kept between installs (incremental rebuilds).
        abi = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
        build_dir = os.path.join(HERE, "build", f"pip-{abi}")
        args = [cmake, "-S", HERE, "-B", build_dir, "-DSCALEINV_BRAIN_ONLY=ON", "-DCMAKE_BUILD_TYPE=Release",
                f"-DSCALEINV_PYTHON={sys.executable}"]
        try:  # the build environment's pybind11 (PyPI's); else CMake finds Debian's pybind11-dev
            import pybind11
            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            args += ["-G", "Ninja"]
        subprocess.check_call(args)
        subprocess.check_call([cmake, "--build", build_dir, "--target", "_scaleinv", "-j", str(os.cpu_count() or 1)])
        built = glob.glob(os.path.join(build_dir, "python", "_scaleinv*" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")))
        if not built:
            sys.exit(f"scaleinv: the build left no _scaleinv extension in {build_dir}/python")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(ext_modules=[CMakeExtension("_scaleinv")], cmdclass={"build_ext": CMakeBuild})
