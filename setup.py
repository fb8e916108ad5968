"""The compiled parts of Freshet, C extensions built with the machine's C compiler at install (everything else is
in pyproject.toml): the record-batch decoder of the columnar range reader, and the broker's record walk."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[Extension("freshet.client._recordset", ["src/freshet/client/_recordset.c"], extra_compile_args=FLAGS),
                   # the broker's walk over a produced batch's records (the compacted-topic key check); without it
                   # freshet.format.record_batch walks them in Python
                   Extension("freshet.format._scan", ["src/freshet/format/_scan.c"], extra_compile_args=FLAGS)])
