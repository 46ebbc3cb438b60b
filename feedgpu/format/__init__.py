"""The on-disk contract: TFRecord framing and the Example codec (`records`), file names and
TFDS metadata (`layout`), the typed manifest `feedgpu.json` (`manifest`), and `verify`.

Nothing here imports TensorFlow: converter workers write these files from plain processes.
Readers (the pipeline, verify, bench) learn everything about a dataset from its manifest.
"""
