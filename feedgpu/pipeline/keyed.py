"""Keyed randomness: every random draw of an epoch comes from (seed, the epoch's number, the
element's place in it), never from a stateful op, so any batch of any epoch can be produced
again (exact resume). A leaf: it imports nothing else of the pipeline."""

from __future__ import annotations

from typing import Any

from feedgpu.tf_private import graph_seed_cleared

# Epoch keys stay below 2**62, so a key plus an element's index within its epoch never overflows.
_KEY_BITS = (1 << 62) - 1


def epoch_key(seed: int, epoch: Any) -> Any:
    """An epoch's key: every random draw of the epoch is keyed by it (file order, shuffle, and
    with the element's index, each augmentation), so any epoch can be replayed from its number."""
    import tensorflow as tf

    pair = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    bits = tf.random.stateless_uniform([], pair, minval=None, maxval=None, dtype=tf.int64)
    return tf.bitwise.bitwise_and(bits, _KEY_BITS)


def numbered(ds: Any, key: Any, keyed: bool, seed: int) -> Any:
    """(index, element) pairs; the index keys the element's random draws. Keyed (an epoch plan):
    its place in the epoch plus the epoch's key, the same whenever the epoch is replayed.
    Otherwise a fresh number per element on each iteration (reproducible per seed), so epochs
    differ even where nothing reorders the elements."""
    import tensorflow as tf

    if keyed:
        return ds.enumerate(start=key)
    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    return tf.data.Dataset.zip((draws, ds))


def keyed_shuffle(ds: Any, buffer: int, key: Any) -> Any:
    """ds through a shuffle buffer seeded by `key` alone.

    tf.data pairs an op seed with the graph-level seed (`tf.random.set_seed`): a script that
    sets it, or not, would see another order, and a graph seed of 0 even breaks a tensor op
    seed; cleared while the shuffle is made (inside a dataset function: that function's graph
    only), the order depends on the key alone. Reshuffled on each iteration: that is what a
    pipeline without a position wants, and inside an epoch plan every epoch makes its own.
    """
    with graph_seed_cleared():
        return ds.shuffle(buffer, seed=key, reshuffle_each_iteration=True)
