"""The one thing pyproject.toml cannot say: the packages found under fa4num/ plus fa4num.polys_data, the
top-level polys/ folder that pyproject.toml's package-dir maps into the package (see there)."""
from setuptools import find_namespace_packages, setup

setup(packages=find_namespace_packages(include=["fa4num", "fa4num.*"]) + ["fa4num.polys_data"])
