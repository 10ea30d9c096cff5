"""The package version, in a module of its own: read by `mstta.__init__`, the feature-file `meta`,
results' `versions` and pyproject.toml (`[tool.setuptools.dynamic]`), without importing the engine."""

__version__ = "0.1.0"
