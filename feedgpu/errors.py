"""The exceptions feedgpu raises for users: one base class, printed by the CLI as one line."""

from __future__ import annotations


class FeedgpuError(Exception):
    """Base of every error meant for a user: its message says what was wrong and what to do."""


class UsageError(FeedgpuError, ValueError):
    """The command or its options are wrong (the CLI exits 2)."""


class InputError(FeedgpuError):
    """An input file or folder cannot be used (with --strict, the first bad file)."""


class DatasetError(FeedgpuError):
    """A converted dataset is missing, damaged, or was written with other options."""


class DeviceSetupError(FeedgpuError, RuntimeError):
    """Accelerator settings (memory growth, visible GPUs) asked for after TensorFlow already
    initialised its devices."""
