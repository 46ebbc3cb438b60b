"""The one compiled part: WordPiece ids of plain texts (converters/text/plain_wordpiece.py).

Everything else is in pyproject.toml. The step is optional: where it cannot be compiled (no C
compiler or Python headers), the package installs without it and tensorflow-text tokenizes
every text instead. CI checks that it was built (.ci/wheel_check, tests/test_plain_wordpiece.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "feedgpu.converters.text._wordpiece",
            ["converters/text/_wordpiece.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
