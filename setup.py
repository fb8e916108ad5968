"""The one compiled part of Freshet: the record-batch decoder of the columnar range reader (a C extension
built with the machine's C compiler at install; everything else is in pyproject.toml)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("freshet.client._recordset", ["src/freshet/client/_recordset.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
