"""What pyproject.toml does not declare: the compiled remote-write scanner and text template read.

telemetry/ingestion/_rwscan.c and _textscan.c use only Python's C API (no numpy headers). Both
are optional: without a C compiler the install still succeeds and the Python/numpy code, with
the same results, takes their place (telemetry.ingestion.remote_write.COMPILED_SCANNER and
telemetry.ingestion.prometheus_text.COMPILED_TEMPLATE_READ say which).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("telemetry.ingestion._rwscan", ["telemetry/ingestion/_rwscan.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # the compiled read of a text scrape through its host's template, as optional
                   # (telemetry.ingestion.prometheus_text.COMPILED_TEMPLATE_READ says which runs)
                   Extension("telemetry.ingestion._textscan", ["telemetry/ingestion/_textscan.c"],
                             extra_compile_args=["-O2"], optional=True)])
