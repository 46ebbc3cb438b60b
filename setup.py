"""The compiled steps of text conversion (converters/text/native.py says what each does).

Everything else is in pyproject.toml. The steps are optional: where they cannot be compiled (no
C compiler or Python headers), the package installs without them and the Python and TensorFlow
path does their work. CI checks that they were built (.ci/wheel_check, tests/test_native.py).
"""

from setuptools import Extension, setup

HEADERS = ("_wordpiece.h", "_json_line.h", "_records.h", "_int64s.h", "_varints.h")

setup(
    ext_modules=[
        Extension(
            f"feedgpu.converters.text.{name}",
            [f"converters/text/{source}" for source in sources],
            depends=[f"converters/text/{h}" for h in HEADERS],
            extra_compile_args=["-O2"],
            optional=True,
        )
        for name, sources in (
            ("_wordpiece", ["_wordpiece.c", "_chars.c", "_texts.c", "_json_lines.c"]),
            (
                "_records",
                ["_records.c", "_framing.c", "_route.c", "_lines.c"],
            ),
        )
    ]
)
