"""Builds libomptpy.so (the OMPT tool, csrc/tool/: plain C, no Python), its
preload hook libomptpy_hook.so (csrc/hook/) and the _core extension module
that binds the tool (csrc/ext/), and bundles an LLVM libomp (runtime/).  Only
a C compiler and the Python headers are needed: the OMPT declarations are the
project's own (csrc/tool/omptpy_ompt.h).  Where libotf2 and its headers are
(Debian: libotf2-trace-dev; Score-P's, found by otf2-config), it also builds
the _otf2 extension (csrc/otf2/), the OTF2 export's writer; without them
that one extension is left out (optional) and the OTF2 export says why.
Where an MPI C compiler is found (``mpicc``, or the one OMPTPY_MPICC names;
OMPTPY_MPICC=off: none), the MPI interposition library libomptpy_mpi.so
(csrc/mpi/) is built against that MPI."""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime.bundle import LICENSE_NAME, SONAME, bundle

# Each folder of csrc/ is one thing (csrc/*/README.md): every C file of tool/ goes
# into libomptpy.so, every one of hook/ into libomptpy_hook.so, every one of ext/
# into _core.
TOOL_SOURCES = sorted(glob.glob(os.path.join("csrc", "tool", "*.c")))
HOOK_SOURCES = sorted(glob.glob(os.path.join("csrc", "hook", "*.c")))
EXT_SOURCES = sorted(glob.glob(os.path.join("csrc", "ext", "*.c")))
OTF2_SOURCES = sorted(glob.glob(os.path.join("csrc", "otf2", "*.c")))
# The public headers, shipped in the package (ompt_py.include_dir()): the record,
# for native handlers, and the region markers, for extensions.
INCLUDE_DIR = os.path.join("csrc", "include")
PUBLIC_HEADERS = sorted(n for n in os.listdir(INCLUDE_DIR) if n.endswith(".h"))
CFLAGS = ["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"]
TOOL_NAME = "libomptpy.so"
HOOK_NAME = "libomptpy_hook.so"
MPI_SOURCES = sorted(glob.glob(os.path.join("csrc", "mpi", "*.c")))
MPI_NAME = "libomptpy_mpi.so"


def mpicc() -> str | None:
    """The MPI C compiler to build libomptpy_mpi.so with, None when there is none."""
    given = os.environ.get("OMPTPY_MPICC")
    if given == "off":
        return None
    return shutil.which(given or "mpicc")


class BuildToolAndExtension(build_ext):
    """Links csrc/tool/ into ompt_py/libomptpy.so, then _core against it ($ORIGIN rpath),
    and puts the bundled libomp into ompt_py/runtime/."""

    def build_extension(self, ext: Extension) -> None:
        if ext.name != "ompt_py._core":
            super().build_extension(ext)
            return
        outdir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(outdir, exist_ok=True)
        objects = self.compiler.compile(
            TOOL_SOURCES, output_dir=self.build_temp, include_dirs=[INCLUDE_DIR],
            extra_postargs=CFLAGS
        )
        self.compiler.link_shared_object(
            objects,
            os.path.join(outdir, TOOL_NAME),
            libraries=["pthread", "dl", "rt", "m", "gcc_s"],  # gcc_s: _Unwind_Backtrace
            extra_postargs=[f"-Wl,-soname,{TOOL_NAME}", "-Wl,-z,defs"],
        )
        hook_objects = self.compiler.compile(HOOK_SOURCES, output_dir=self.build_temp,
                                             extra_postargs=CFLAGS)
        self.compiler.link_shared_object(
            hook_objects, os.path.join(outdir, HOOK_NAME), libraries=["dl"],
            extra_postargs=[f"-Wl,-soname,{HOOK_NAME}", "-Wl,-z,defs"],
        )
        self._mpi = self._build_mpi(outdir)
        self._bundled = bundle(os.path.join(outdir, "runtime"), self.build_temp) is not None
        os.makedirs(os.path.join(outdir, "include"), exist_ok=True)
        for header in PUBLIC_HEADERS:
            self.copy_file(os.path.join(INCLUDE_DIR, header),
                           os.path.join(outdir, "include", header), level=self.verbose)
        ext.library_dirs = [outdir]
        ext.extra_objects = [os.path.join(outdir, TOOL_NAME)]
        ext.extra_link_args = ["-Wl,-rpath,$ORIGIN"]
        super().build_extension(ext)

    def _build_mpi(self, outdir: str) -> bool:
        """libomptpy_mpi.so with the MPI C compiler (mpicc); False when there is none."""
        compiler = mpicc()
        if compiler is None:
            print("ompt-py: no MPI C compiler (mpicc): libomptpy_mpi.so (ompt-py run --mpi) "
                  "is not built", file=sys.stderr)
            return False
        subprocess.run([compiler, *CFLAGS, f"-I{INCLUDE_DIR}", "-shared", "-o",
                        os.path.join(outdir, MPI_NAME), *MPI_SOURCES, "-ldl",
                        f"-Wl,-soname,{MPI_NAME}", "-Wl,-z,defs"],
                       check=True)
        return True

    def _extra_files(self) -> list[tuple[str, str]]:
        """(built, in-place) paths of what is built beside the _core extension."""
        build_py = self.get_finalized_command("build_py")
        inplace_ext, built_ext = self._get_inplace_equivalent(build_py, self.extensions[0])
        names = [TOOL_NAME, HOOK_NAME, *(os.path.join("include", h) for h in PUBLIC_HEADERS)]
        if getattr(self, "_mpi", False):
            names.append(MPI_NAME)
        if getattr(self, "_bundled", False):
            names += [os.path.join("runtime", SONAME), os.path.join("runtime", LICENSE_NAME)]
        return [
            (os.path.join(os.path.dirname(built_ext), n),
             os.path.join(os.path.dirname(inplace_ext), n))
            for n in names
        ]

    def copy_extensions_to_source(self) -> None:
        super().copy_extensions_to_source()
        for built, inplace in self._extra_files():
            os.makedirs(os.path.dirname(inplace), exist_ok=True)
            self.copy_file(built, inplace, level=self.verbose)

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            yield from self._extra_files()

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        return outputs if self.inplace else [*outputs, *(b for b, _ in self._extra_files())]


def otf2_flags() -> list[str]:
    """The compiler and linker flags of libotf2: otf2-config's (Score-P's and Debian's
    OTF2 have it), else none (the headers and library where the compiler looks)."""
    config = shutil.which("otf2-config")
    if config is None:
        return []
    try:
        out = subprocess.run([config, "--cppflags", "--ldflags"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return shlex.split(out)


setup(
    ext_modules=[
        Extension(
            "ompt_py._core",
            sources=EXT_SOURCES,
            # "tool/omptpy_api.h" names the tool's headers the extension uses (ext/README.md)
            include_dirs=[INCLUDE_DIR, "csrc"],
            extra_compile_args=CFLAGS,
            libraries=["m", "pthread"],  # pthread: pair_events' second half
        ),
        Extension(
            "ompt_py._otf2",
            sources=OTF2_SOURCES,
            extra_compile_args=CFLAGS + [f for f in otf2_flags() if f.startswith("-I")],
            extra_link_args=[f for f in otf2_flags() if not f.startswith("-I")]
            + ["-Wl,-rpath," + d[2:] for d in otf2_flags() if d.startswith("-L")],
            libraries=["otf2"],
            optional=True,  # without libotf2: no OTF2 export (io/otf2.py says so)
        ),
    ],
    cmdclass={"build_ext": BuildToolAndExtension},
)
