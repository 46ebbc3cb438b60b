"""Measuring whether the accelerator is fed: device set-up, consumer models, the three-phase
measurement of `bench_input`, ablation, the report and GPU utilisation sampling.

Builds pipelines through `feedgpu.pipeline`; the CLI's bench-input is a thin layer over it.
"""
