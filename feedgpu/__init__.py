"""feedgpu: keep accelerators fed. Convert data to sharded TFRecords, build expert tf.data input,
and measure whether the accelerator is saturated (bench_input).

Importing feedgpu does not import TensorFlow; the functions that need it import it when called.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Where each public name lives: imported on first use, so `feedgpu convert ...` does not pay
# for the benchmark, pipeline and service modules (~55 ms of a ~1 s image conversion).
_EXPORTS = {
    "BenchOptions": "feedgpu.bench",
    "bench_input": "feedgpu.bench",
    "BenchReport": "feedgpu.bench_report",
    "render_report": "feedgpu.bench_report",
    "ConversionReport": "feedgpu.conversion",
    "ImageOptions": "feedgpu.converters.images",
    "convert_images": "feedgpu.converters.images",
    "TextOptions": "feedgpu.converters.text",
    "convert_text": "feedgpu.converters.text",
    "DeviceConfig": "feedgpu.device",
    "DeviceSetup": "feedgpu.device",
    "DeviceSetupError": "feedgpu.device",
    "resolve_devices": "feedgpu.device",
    "setup_devices": "feedgpu.device",
    "DatasetError": "feedgpu.errors",
    "FeedgpuError": "feedgpu.errors",
    "InputError": "feedgpu.errors",
    "UsageError": "feedgpu.errors",
    "Feature": "feedgpu.format",
    "read_manifest": "feedgpu.format",
    "PipelineSpec": "feedgpu.pipeline",
    "build_pipeline": "feedgpu.pipeline",
    "dropped_records": "feedgpu.pipeline",
    "read_dataset": "feedgpu.pipeline",
    "write_sample_images": "feedgpu.samples",
    "start_dispatcher": "feedgpu.service",
    "start_worker": "feedgpu.service",
    "VerifyReport": "feedgpu.verify",
    "verify_dataset": "feedgpu.verify",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'feedgpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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
