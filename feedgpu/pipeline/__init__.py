"""The tf.data input pipeline: `PipelineSpec` (every decision, the automatic ones from the
manifest), readers, image transforms, text batching, `build_pipeline`, and tf.data service.

Reads what `feedgpu.format` defines; knows nothing of converters or of measuring.
"""

from feedgpu.pipeline.build import build_pipeline
from feedgpu.pipeline.readers import dropped_records, read_dataset
from feedgpu.pipeline.spec import PipelineSpec

__all__ = ["PipelineSpec", "build_pipeline", "dropped_records", "read_dataset"]
