"""Packaging beyond pyproject.toml: the qualification suites ship inside the plugin.

The repository keeps the suites at its top (``suites/``, where a reader looks for them); the wheel carries that
same folder as ``pytest_fabricqa/suites``, so ``pip install pytest-fabricqa`` and ``pytest --lab=NAME`` qualify a
lab without a clone. pyproject.toml cannot both find the packages and map a folder from outside them into one,
hence these lines; everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["pytest_fabricqa", "pytest_fabricqa.*"]), "pytest_fabricqa.suites"],
    package_dir={"pytest_fabricqa.suites": "suites"},
)
