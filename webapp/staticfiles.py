"""plotly.js as a static file: the copy inside the installed plotly package, published as
``vendor/plotly-<version>.min.js`` so collectstatic and WhiteNoise treat it like our own files
(compressed once at collectstatic, cached for good because the version is in the name)."""
from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage


class _OneFileStorage(FileSystemStorage):
    """Read-only storage exposing one file under a public name."""

    def __init__(self, name: str, file: Path):
        super().__init__(location=str(file.parent))
        self._name, self._file = name, file

    def path(self, name):
        if name != self._name:
            raise FileNotFoundError(name)
        return str(self._file)


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        import plotly

        from investigations.templatetags.precursor import plotly_static_path

        self.name = plotly_static_path()
        self.file = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        self.storage = _OneFileStorage(self.name, self.file)

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != self.name:
            return [] if (find_all or kwargs.get("all")) else None
        found = str(self.file)
        return [found] if (find_all or kwargs.get("all")) else found

    def list(self, ignore_patterns):
        yield self.name, self.storage
