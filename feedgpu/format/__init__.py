"""The on-disk contract: TFRecord framing and the Example codec (`records`), the features as one
`Schema` (`schema`), file names (`names`), TFDS metadata (`tfds`), the typed manifest
`feedgpu.json` (`manifest`), record indexes (`index`) and `verify`.

Nothing here imports TensorFlow: converter workers write these files from plain processes.
Readers (the pipeline, verify, bench) learn everything about a dataset from its manifest.
"""
