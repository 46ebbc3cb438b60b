"""`python -m feedgpu` runs the CLI."""

from feedgpu.cli import run

run()
