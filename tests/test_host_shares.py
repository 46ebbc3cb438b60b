"""Hosts' shares of a split: equal by records, every record read once, the epoch the same
number of batches on every host, and each replica's batch the global batch's share."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import tensorflow as tf

import feedgpu
from feedgpu import PipelineSpec
from feedgpu.errors import DatasetError, UsageError
from feedgpu.format.manifest import ShardInfo
from feedgpu.pipeline.host_shares import host_shares


def _records(pieces: tuple, sizes: dict[str, int]) -> list[tuple[str, int]]:
    out = []
    for p in pieces:
        take = sizes[p.file] - p.skip if p.take == -1 else p.take
        out += [(p.file, p.skip + i) for i in range(take)]
    return out


@pytest.mark.parametrize("hosts", [2, 3, 4, 7])
def test_record_shares_are_equal_and_read_every_record_once(hosts: int) -> None:
    sizes = {"a": 30, "b": 25, "c": 20, "d": 15, "e": 6}
    shards = [ShardInfo(f, n, 100 * n) for f, n in sizes.items()]
    shares = host_shares(shards, hosts)
    counts = [sum(p.examples for p in share) for share in shares]
    assert max(counts) - min(counts) <= 1 and sum(counts) == 96
    read = [r for share in shares for r in _records(share, sizes)]
    assert sorted(read) == sorted((f, i) for f, n in sizes.items() for i in range(n))
    for share, count in zip(shares, counts, strict=True):
        assert len(_records(share, sizes)) == count


def test_an_empty_shard_is_no_host_s_share() -> None:
    shards = [ShardInfo("a", 8, 8, records=2), ShardInfo("b", 0, 0, records=0)]
    assert [[p.file for p in share] for share in host_shares(shards, 2)] == [["a"], []]


def test_shards_of_blocks_go_whole_to_the_least_loaded_host() -> None:
    sizes = {"a": 40, "b": 36, "c": 32, "d": 28, "e": 8}
    shards = [ShardInfo(f, n, n, records=n // 4) for f, n in sizes.items()]
    shares = host_shares(shards, 2)
    assert [[p.file for p in share] for share in shares] == [["a", "d", "e"], ["b", "c"]]
    assert all(p.skip == 0 and p.take == -1 for share in shares for p in share)
    with pytest.raises(DatasetError, match="re-convert with --num-shards 6"):
        host_shares(shards, 6)


def test_each_replica_batches_its_share_of_the_global_batch(image_data: Path) -> None:
    spec = PipelineSpec.for_dataset(str(image_data), batch_size=8, image_size=(8, 8))
    ctx = tf.distribute.InputContext(num_input_pipelines=1, num_replicas_in_sync=2)
    batches = [int(images.shape[0]) for images, _ in feedgpu.build_pipeline(spec, ctx)]
    # 36 examples: 9 batches of 4, dealt to 2 replicas a step: 4 whole steps, never an empty one
    assert batches == [4] * 8
    position = feedgpu.InputPosition(spec.with_changes(seed=0), ctx)
    assert position.batches_per_epoch == 8
    position.advance()  # a step: a batch for each replica
    assert position.batches == 2
    with pytest.raises(UsageError, match="batch_size 7 does not divide among 2 replicas"):
        feedgpu.build_pipeline(spec.with_changes(batch_size=7), ctx)


def _host_batches(spec: PipelineSpec, hosts: int) -> list[list[int]]:
    sizes = []
    for i in range(hosts):
        ctx = tf.distribute.InputContext(num_input_pipelines=hosts, input_pipeline_id=i)
        batches = feedgpu.build_pipeline(spec, ctx)
        sizes.append([int(tf.nest.flatten(b)[-1].shape[0]) for b in batches])
    return sizes


def test_image_hosts_get_equal_shares_of_uneven_shards(image_data: Path) -> None:
    # 36 examples in 4 shards over 3 hosts: 12 each, where whole files gave 9, 9 and 18
    spec = PipelineSpec.for_dataset(str(image_data), batch_size=4, image_size=(8, 8))
    assert _host_batches(spec, 3) == [[4] * 3] * 3
    ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=2)
    assert sum(1 for _ in feedgpu.read_dataset(spec, ctx)) == 12


def test_text_hosts_of_unequal_shards_run_the_same_batches_and_say_so(
    text_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # records of 4 documents in 4 shards over 3 hosts: whole files, shares unequal
    spec = PipelineSpec.for_dataset(str(text_data), batch_size=4, training=True, seed=1)
    with caplog.at_level(logging.WARNING, logger="feedgpu.pipeline.build"):
        sizes = _host_batches(spec, 3)
    assert len({len(s) for s in sizes}) == 1 and len(sizes[0]) > 0
    assert all(size == 4 for s in sizes for size in s)  # never an empty or partial batch
    assert "every host's epoch is cut to" in caplog.text
