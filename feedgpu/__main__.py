"""`python -m feedgpu` runs the CLI."""

from feedgpu.cli import main

raise SystemExit(main())
