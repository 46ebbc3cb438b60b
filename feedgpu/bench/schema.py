"""BENCH_REPORT_SCHEMA: the JSON Schema `bench-input --json` follows (also printed by
`feedgpu bench-input --print-schema`), so other tools can rely on the report's fields."""

from __future__ import annotations

from typing import Any

# 2: spreads, "uncertain", the user's model and data. 3: what the step ran as ("run"), the
# batches' shape ("ran_with"), the advice, why a verdict is uncertain, the side by side's spreads.
# 4: what a report draws: each round step by step ("rounds"), the spec's reasons, each stage's
# settings as TensorFlow ran them ("stages"), the run's environment.
SCHEMA_ID = "feedgpu.bench-input/4"
# The verdicts' lines on input wait's share of step time (the TF Profiler's input-bound
# thresholds): here, so the report's pictures draw them without the measuring modules.
SATURATED_SHARE = 0.05
HIGHLY_SHARE = 0.20
_RATE = {"type": "number", "minimum": 0}
_SPREAD = {
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["p10", "p90", "rounds"],
            "properties": {"p10": _RATE, "p90": _RATE, "rounds": {"type": "integer", "minimum": 0}},
        },
    ]
}
_VERDICTS = ["saturated", "moderately input-bound", "highly input-bound"]
# The batches a pipeline gave: image size and dtype, or text length; and the batch size.
_RAN_WITH = {
    "type": "object",
    "properties": {
        "image_size": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
        "dtype": {"type": "string"},
        "max_length": {"type": "integer", "minimum": 1},
        "text_mode": {"type": "string"},
        "batch_size": {"type": "integer", "minimum": 1},
    },
}
_STEPS = {
    "type": "object",
    "required": [
        "examples_per_s",
        "step_ms_median",
        "step_ms_p90",
        "wait_ms_median",
        "input_share",
        "num_steps",
        "total_s",
        "warmup_steps",
        "loss_first",
        "loss_last",
    ],
    "properties": {
        "examples_per_s": _RATE,
        "step_ms_median": _RATE,
        "step_ms_p90": _RATE,
        "wait_ms_median": _RATE,
        "input_share": {"type": "number", "minimum": 0, "maximum": 1},
        "num_steps": {"type": "integer", "minimum": 0},
        "total_s": {"type": "number", "minimum": 0},
        "warmup_steps": {"type": "integer", "minimum": 0},
        "loss_first": {"type": ["number", "null"]},
        "loss_last": {"type": ["number", "null"]},
        "spread": _SPREAD,
        "share_spread": _SPREAD,
        "stopped_early": {"type": "boolean"},
        "rounds": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["untimed", "steps"],
                "properties": {
                    "untimed": {"type": "integer", "minimum": 0},
                    "steps": {
                        "type": "array",
                        "items": {"type": "array", "items": _RATE, "minItems": 2, "maxItems": 2},
                    },
                },
            },
        },
    },
}
_STAGES = {
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["source", "stages"],
            "properties": {
                "source": {"type": "string"},
                "stages": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["path", "stage", "settings"],
                        "properties": {
                            "path": {"type": "string"},
                            "stage": {"type": "string"},
                            "settings": {"type": "object"},
                            "ranges": {"type": "object"},
                            "autotune": {"type": ["boolean", "null"]},
                        },
                    },
                },
            },
        },
    ]
}
BENCH_REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "feedgpu bench-input report",
    "type": "object",
    "required": [
        "schema",
        "data_dir",
        "split",
        "kind",
        "model",
        "batch_size",
        "device",
        "pipeline",
        "ceiling",
        "end_to_end",
        "input_share",
        "fraction_of_ceiling",
        "verdict",
        "ablation",
        "capacity",
        "spec",
    ],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "data_dir": {"type": "string"},
        "split": {"type": "string"},
        "kind": {"enum": ["image", "text"]},
        "model": {"type": "string"},
        "batch_size": {"type": "integer", "minimum": 1},
        "accumulate": {"type": "integer", "minimum": 1},
        "device": {
            "type": "object",
            "required": ["device_type", "precision", "xla", "strategy", "num_replicas"],
            "properties": {
                "device_type": {"enum": ["CPU", "GPU"]},
                "gpus": {"type": "array", "items": {"type": "string"}},
                "precision": {"enum": ["float32", "mixed_float16", "mixed_bfloat16"]},
                "xla": {"type": "boolean"},
                "xla_rule": {"enum": ["auto", "on", "off"]},
                "strategy": {"type": "string"},
                "num_replicas": {"type": "integer", "minimum": 1},
                "notes": {"type": "array", "items": {"type": "string"}},
            },
        },
        "pipeline": {
            "type": "object",
            "required": [
                "first_batch_s",
                "examples_per_s",
                "batches_per_s",
                "host_cpu_ms_per_example",
                "num_batches",
            ],
            "properties": {
                "first_batch_s": _RATE,
                "examples_per_s": _RATE,
                "batches_per_s": _RATE,
                "host_cpu_ms_per_example": _RATE,
                "num_batches": {"type": "integer", "minimum": 1},
                "spread": _SPREAD,
            },
        },
        "ceiling": _STEPS,
        "end_to_end": _STEPS,
        "input_share": {"type": "number", "minimum": 0, "maximum": 1},
        "fraction_of_ceiling": _RATE,
        "verdict": {"enum": [*_VERDICTS, "uncertain"]},
        "verdict_range": {
            "type": "array",
            "items": {"enum": _VERDICTS},
            "minItems": 2,
            "maxItems": 2,
        },
        "measurement_problem": {"type": ["string", "null"]},
        "uncertain_reason": {"type": ["string", "null"]},
        "advice": {"type": "array", "items": {"type": "string"}},
        "run": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["xla", "xla_reason", "policy", "steps_per_execution"],
                    "properties": {
                        "xla": {"type": "boolean"},
                        "xla_reason": {"type": "string"},
                        "policy": {"type": "string"},
                        "steps_per_execution": {"type": "integer", "minimum": 1},
                        "other_xla_step_ms": {"type": ["number", "null"], "minimum": 0},
                        "compile_s": _RATE,
                    },
                },
            ]
        },
        "ran_with": _RAN_WITH,
        "notes": {"type": "array", "items": {"type": "string"}},
        "compared": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["data_dir", "examples_per_s", "input_share", "verdict"],
                    "properties": {
                        "data_dir": {"type": "string"},
                        "examples_per_s": _RATE,
                        "input_share": {"type": "number", "minimum": 0, "maximum": 1},
                        "verdict": {"enum": [*_VERDICTS, "uncertain"]},
                        "fraction_of_ceiling": _RATE,
                        "spread": _SPREAD,
                        "ran_with": _RAN_WITH,
                        "pipeline_examples_per_s": _RATE,
                    },
                },
            ]
        },
        "gpu_utilization": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "gpu_note": {"type": ["string", "null"]},
        "ablation": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["baseline_examples_per_s", "rows", "bottleneck", "advice"],
                    "properties": {
                        "baseline_examples_per_s": _RATE,
                        "baseline_spread": _SPREAD,
                        "rows": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["variant", "stage", "examples_per_s", "speedup"],
                                "properties": {
                                    "variant": {"type": "string"},
                                    "stage": {"enum": [None, "read", "parse", "decode", "augment"]},
                                    "examples_per_s": _RATE,
                                    "speedup": _RATE,
                                    "saved_ms_per_example": {"type": ["number", "null"]},
                                    "spread": _SPREAD,
                                    "measurable": {"type": "boolean"},
                                },
                            },
                        },
                        "bottleneck": {"enum": [None, "read", "parse", "decode", "augment"]},
                        "advice": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    },
                },
            ]
        },
        "capacity": {
            "type": "object",
            "required": ["host_cpu_ms_per_example", "cores_needed", "host_cores", "hosts_needed"],
            "properties": {
                "host_cpu_ms_per_example": _RATE,
                "cores_needed": _RATE,
                "host_cores": {"type": "integer", "minimum": 1},
                "hosts_needed": {"type": "integer", "minimum": 1},
                "service_workers": {"type": ["integer", "null"], "minimum": 1},
                "service_workers_needed": {"type": ["integer", "null"], "minimum": 1},
            },
        },
        "spec": {
            "oneOf": [
                {"type": "null"},
                {"type": "object", "required": ["data_dir", "batch_size", "kind"]},
            ]
        },
        "spec_reasons": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
        },
        "stages": _STAGES,
        "environment": {"type": "object"},
        "profile_dir": {"type": ["string", "null"]},
        "seconds_per_phase": _RATE,
    },
}
