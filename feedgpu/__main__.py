"""`python -m feedgpu` runs the CLI."""

from feedgpu.cli import run

if __name__ == "__main__":
    run()
