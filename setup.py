"""The license in the form the installed setuptools reads without a deprecation warning (the
rest of the metadata is in pyproject.toml, which lists ``license`` as dynamic): an SPDX
expression from setuptools 77 on (Python 3.9 and later get it), the older field before
(Python 3.8's last setuptools is 75)."""

import setuptools

if int(setuptools.__version__.split(".")[0]) >= 77:
    setuptools.setup(license_expression="MIT")
else:
    setuptools.setup(license="MIT")
