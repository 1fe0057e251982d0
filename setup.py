"""The one thing pyproject.toml does not declare: the compiled remote-write scanner.

telemetry/ingestion/_rwscan.c uses only Python's C API (no numpy headers). It is optional:
without a C compiler the install still succeeds and the numpy scanner, with the same
results, takes its place (telemetry.ingestion.remote_write.COMPILED_SCANNER says which).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("telemetry.ingestion._rwscan", ["telemetry/ingestion/_rwscan.c"],
                             extra_compile_args=["-O2"], optional=True)])
