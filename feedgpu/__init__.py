"""feedgpu: keep accelerators fed. Convert data to sharded TFRecords, build expert tf.data input,
and measure whether the accelerator is saturated (bench_input).

Importing feedgpu does not import TensorFlow; the functions that need it import it when called.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feedgpu.bench.device import DeviceConfig, setup_devices
    from feedgpu.bench.measure import BenchOptions, bench_input
    from feedgpu.bench.monitor import FeedMonitor, watch_input
    from feedgpu.bench.report import BenchReport
    from feedgpu.convert.run import ConversionReport
    from feedgpu.convert.run_options import RunOptions
    from feedgpu.converters.images import ImageOptions, convert_images
    from feedgpu.converters.text.convert import TextOptions, convert_text
    from feedgpu.errors import (
        DatasetError,
        DeviceSetupError,
        FeedgpuError,
        InputError,
        UsageError,
    )
    from feedgpu.format.manifest import Manifest, read_manifest
    from feedgpu.format.records import block_documents
    from feedgpu.format.verify import VerifyReport, verify_dataset
    from feedgpu.pipeline.build import build_pipeline
    from feedgpu.pipeline.fit_backup import FitBackup
    from feedgpu.pipeline.position import InputPosition
    from feedgpu.pipeline.readers import dropped_records, read_dataset
    from feedgpu.pipeline.service_guard import ServiceGuard
    from feedgpu.pipeline.spec import PipelineSpec

# Where each public name lives: imported on first use, so `feedgpu convert ...` does not pay
# for the benchmark, pipeline and service modules. The public API is what users call; the
# rest is reachable from its sub-package (feedgpu.samples.write_sample_images,
# feedgpu.bench.device.resolve_devices, feedgpu.pipeline.service.start_worker, ...).
_EXPORTS = {
    "BenchOptions": "feedgpu.bench.measure",
    "bench_input": "feedgpu.bench.measure",
    "FeedMonitor": "feedgpu.bench.monitor",
    "watch_input": "feedgpu.bench.monitor",
    "BenchReport": "feedgpu.bench.report",
    "ConversionReport": "feedgpu.convert.run",
    "RunOptions": "feedgpu.convert.run_options",
    "ImageOptions": "feedgpu.converters.images",
    "convert_images": "feedgpu.converters.images",
    "TextOptions": "feedgpu.converters.text.options",
    "convert_text": "feedgpu.converters.text.convert",
    "DeviceConfig": "feedgpu.bench.device",
    "DeviceSetupError": "feedgpu.errors",
    "setup_devices": "feedgpu.bench.device",
    "DatasetError": "feedgpu.errors",
    "FeedgpuError": "feedgpu.errors",
    "InputError": "feedgpu.errors",
    "UsageError": "feedgpu.errors",
    "block_documents": "feedgpu.format.records",
    "Manifest": "feedgpu.format.manifest",
    "read_manifest": "feedgpu.format.manifest",
    "PipelineSpec": "feedgpu.pipeline",
    "build_pipeline": "feedgpu.pipeline",
    "FitBackup": "feedgpu.pipeline.fit_backup",
    "ServiceGuard": "feedgpu.pipeline.service_guard",
    "InputPosition": "feedgpu.pipeline.position",
    "dropped_records": "feedgpu.pipeline",
    "read_dataset": "feedgpu.pipeline",
    "VerifyReport": "feedgpu.format.verify",
    "verify_dataset": "feedgpu.format.verify",
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
    "DeviceSetupError",
    "FeedMonitor",
    "FeedgpuError",
    "FitBackup",
    "ImageOptions",
    "InputError",
    "InputPosition",
    "Manifest",
    "PipelineSpec",
    "RunOptions",
    "ServiceGuard",
    "TextOptions",
    "UsageError",
    "VerifyReport",
    "__version__",
    "bench_input",
    "block_documents",
    "build_pipeline",
    "convert_images",
    "convert_text",
    "dropped_records",
    "read_dataset",
    "read_manifest",
    "setup_devices",
    "verify_dataset",
    "watch_input",
]
