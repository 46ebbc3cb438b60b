"""Other programs' chatter kept off feedgpu's output: TensorFlow's native start-up lines, and
the log lines of Beam's worker processes in a quiet conversion.

Loading TensorFlow writes lines like "oneDNN custom operations are on", "Could not find cuda
drivers" and "failed call to cuInit" straight to file descriptor 2, from C++, before feedgpu
prints anything; Beam's worker processes log their start and end to the same descriptor, before
any option can quiet them. They are not problems, and they bury the lines a user should read.
For the block, descriptor 2 (inherited by child processes) goes to a temporary file; afterwards
every line that is not known chatter (a Python warning, a real error) is written back, in order.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# Native lines TensorFlow writes on every start on hosts without a GPU or TensorRT.
TF_CHATTER = re.compile(
    r"oneDNN custom operations|TF_ENABLE_ONEDNN_OPTS|Could not find cuda drivers|cuInit"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning|computation placer"
    r"|This TensorFlow binary is optimized|rebuild TensorFlow with the appropriate compiler"
    r"|All log messages before absl::InitializeLog|Attempting to register factory"
    r"|cuda_executor|cuda_diagnostics|cuda_platform|retrieving CUDA diagnostic|kernel driver"
    r"|hostname: |could not retrieve CUDA device count|TensorFlow was not built with CUDA"
)
# Beam's worker processes (multi-process DirectRunner, portable runners): their INFO and
# WARNING log lines, logged before pipeline options can set their level.
BEAM_CHATTER = re.compile(r"^(INFO|WARNING|DEBUG):(root|__main__|apache_beam)[.:]")


def load_tensorflow(verbose: bool = False) -> None:
    """Import TensorFlow and let it find its devices, without its native start-up chatter
    (verbose: with it).

    Device discovery only lists devices: GPU memory policy can still be set after it.
    """
    if "tensorflow" in sys.modules:
        return
    with contextlib.nullcontext() if verbose else filtered_native_stderr(TF_CHATTER):
        import tensorflow as tf

        tf.config.list_physical_devices()


@contextlib.contextmanager
def filtered_native_stderr(chatter: re.Pattern[str]) -> Iterator[None]:
    """Descriptor 2 into a file for the block; then the lines chatter does not match back."""
    fd = 2  # the descriptor native code and child processes write to, whatever sys.stderr is
    try:
        os.fstat(fd)
    except OSError:  # no descriptor 2 at all: nothing to filter
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().decode("utf-8", "replace").splitlines(keepends=True)
                if not chatter.search(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
