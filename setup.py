"""Builds libomptpy.so (the OMPT tool, plain C, no Python) and the _core
extension module that binds it.  Only a C compiler and the Python headers
are needed: the OMPT declarations are the project's own (csrc/omptpy_ompt.h)."""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

TOOL_SOURCES = [
    os.path.join("csrc", name)
    for name in ("config.c", "clock.c", "buffer.c", "sink.c", "meta.c", "callbacks.c", "tool.c")
]
CFLAGS = ["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"]
TOOL_NAME = "libomptpy.so"


class BuildToolAndExtension(build_ext):
    """Links csrc/ into ompt_py/libomptpy.so, then _core against it ($ORIGIN rpath)."""

    def build_extension(self, ext: Extension) -> None:
        outdir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(outdir, exist_ok=True)
        objects = self.compiler.compile(
            TOOL_SOURCES, output_dir=self.build_temp, include_dirs=["csrc"], extra_postargs=CFLAGS
        )
        self.compiler.link_shared_object(
            objects,
            os.path.join(outdir, TOOL_NAME),
            libraries=["pthread", "dl"],
            extra_postargs=[f"-Wl,-soname,{TOOL_NAME}", "-Wl,-z,defs"],
        )
        ext.library_dirs = [outdir]
        ext.extra_objects = [os.path.join(outdir, TOOL_NAME)]
        ext.extra_link_args = ["-Wl,-rpath,$ORIGIN"]
        super().build_extension(ext)

    def _tool_paths(self) -> tuple[str, str]:
        """(built, in-place) paths of the tool library, beside the _core extension."""
        build_py = self.get_finalized_command("build_py")
        inplace_ext, built_ext = self._get_inplace_equivalent(build_py, self.extensions[0])
        return (
            os.path.join(os.path.dirname(built_ext), TOOL_NAME),
            os.path.join(os.path.dirname(inplace_ext), TOOL_NAME),
        )

    def copy_extensions_to_source(self) -> None:
        super().copy_extensions_to_source()
        self.copy_file(*self._tool_paths(), level=self.verbose)

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            yield self._tool_paths()

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        return outputs if self.inplace else [*outputs, self._tool_paths()[0]]


setup(
    ext_modules=[
        Extension(
            "ompt_py._core",
            sources=["csrc/module.c"],
            include_dirs=["csrc"],
            extra_compile_args=CFLAGS,
            libraries=["m"],
        )
    ],
    cmdclass={"build_ext": BuildToolAndExtension},
)
