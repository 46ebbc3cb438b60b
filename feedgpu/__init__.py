"""feedgpu: keep accelerators fed. Convert data to sharded TFRecords, build expert tf.data input,
and measure whether the accelerator is saturated (bench_input).

Importing feedgpu does not import TensorFlow; the functions that need it import it when called.
"""

from __future__ import annotations

__version__ = "0.1.0"

from feedgpu.bench import BenchOptions, bench_input
from feedgpu.bench_report import BenchReport, render_report
from feedgpu.conversion import ConversionReport
from feedgpu.converters.images import ImageOptions, convert_images
from feedgpu.converters.text import TextOptions, convert_text
from feedgpu.device import (
    DeviceConfig,
    DeviceSetup,
    DeviceSetupError,
    resolve_devices,
    setup_devices,
)
from feedgpu.errors import DatasetError, FeedgpuError, InputError, UsageError
from feedgpu.format import Feature, read_manifest
from feedgpu.pipeline import PipelineSpec, build_pipeline, dropped_records, read_dataset
from feedgpu.samples import write_sample_images
from feedgpu.service import start_dispatcher, start_worker
from feedgpu.verify import VerifyReport, verify_dataset

__all__ = [
    "BenchOptions",
    "BenchReport",
    "ConversionReport",
    "DatasetError",
    "DeviceConfig",
    "DeviceSetup",
    "DeviceSetupError",
    "Feature",
    "FeedgpuError",
    "ImageOptions",
    "InputError",
    "PipelineSpec",
    "TextOptions",
    "UsageError",
    "VerifyReport",
    "__version__",
    "bench_input",
    "build_pipeline",
    "convert_images",
    "convert_text",
    "dropped_records",
    "read_dataset",
    "read_manifest",
    "render_report",
    "resolve_devices",
    "setup_devices",
    "start_dispatcher",
    "start_worker",
    "verify_dataset",
    "write_sample_images",
]
