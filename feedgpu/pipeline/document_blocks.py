"""Records holding blocks of documents (format 3) read as the records of one document each that
format 2 stores: elements of exactly BLOCK documents, the last of an epoch fewer, so everything
after the reader (caches, groups, exact epoch counts, resume) is the same for both formats.

tf.data's own `rebatch` would do this, but it keeps a ragged tensor's rows as one variant each:
blocks then read 1.2-1.6x slower than records of one document (benchmarks/RESULTS.md, "Decisions");
here documents stay flat (ids, lengths, one value a document) until each element is cut.
"""

from __future__ import annotations

from typing import Any

from feedgpu.pipeline.buckets import BLOCK


def documents_in_blocks(parsed: Any, flat: bool = False, block: int = BLOCK) -> Any:
    """Parsed batches of block records (every feature ragged: a list a record) -> elements of
    `block` documents: ids ragged by document, the other features one value a document (flat:
    ids concatenated, as text batching takes them).

    Raises (when read):
        InvalidArgumentError: a record whose lengths do not add up to its ids.
    """
    import tensorflow as tf

    columns = parsed.map(_flat, num_parallel_calls=tf.data.AUTOTUNE)
    empty = {k: tf.zeros([0], s.dtype) for k, s in columns.element_spec.items()}
    # An end mark after the last batch: what is left over then makes the last element. One
    # for each iterator: tf.data service's distributed_epoch splits every source dataset among
    # its workers, and a plain `from_tensors` has one split, so only one worker flushed what it
    # held and the others' documents were lost; an endless source gives each worker its own.
    marked = columns.map(lambda c: (c, False))
    marked = marked.concatenate(tf.data.Dataset.from_tensors((empty, True)).repeat().take(1))

    def carry(held: Any, element: Any) -> tuple[Any, Any]:
        """Whole elements' documents out; fewer than `block` held for the next batch."""
        new, last = element
        both = {k: tf.concat([held[k], new[k]], 0) for k in new}
        lengths = both["length"]
        count = tf.size(lengths, tf.int64)
        cut = tf.where(last, count, count // block * block)
        tokens = tf.reduce_sum(lengths[:cut])
        out = {k: v[:tokens] if k == "input_ids" else v[:cut] for k, v in both.items()}
        rest = {k: v[tokens:] if k == "input_ids" else v[cut:] for k, v in both.items()}
        return rest, out

    elements = marked.scan(empty, carry).flat_map(lambda out: _cut(out, block))
    return elements if flat else elements.map(_as_documents, num_parallel_calls=tf.data.AUTOTUNE)


def checked_block(record: Any) -> Any:
    """One parsed block record, checked that its lengths add up to its ids (ignore_errors
    readers then skip it as damaged)."""
    import tensorflow as tf

    _adds_up(tf.reduce_sum(record["length"]), tf.size(record["input_ids"], tf.int64))
    return record


def _flat(records: Any) -> dict[str, Any]:
    """A batch of block records as flat columns: the ids, and one value a document for the
    rest; checked that each record's lengths add up to its ids."""
    import tensorflow as tf

    _adds_up(tf.reduce_sum(records["length"], axis=1), records["input_ids"].row_lengths())
    return {k: v.flat_values for k, v in records.items()}


def _adds_up(lengths: Any, ids: Any) -> None:
    import tensorflow as tf

    tf.debugging.assert_equal(
        lengths, ids, message="a record's document lengths do not add up to its ids"
    )


def _cut(out: Any, block: int) -> Any:
    """Flat columns of whole elements' documents -> those elements, still flat."""
    import tensorflow as tf

    lengths = out["length"]
    count = tf.size(lengths, tf.int64)
    starts = tf.cumsum(lengths, exclusive=True)

    def element(i: Any) -> dict[str, Any]:
        first, end = i * block, tf.minimum(i * block + block, count)
        columns = {k: v[first:end] for k, v in out.items() if k != "input_ids"}
        begin = starts[first]
        columns["input_ids"] = out["input_ids"][begin : begin + tf.reduce_sum(columns["length"])]
        return columns

    return tf.data.Dataset.range((count + block - 1) // block).map(element)


def _as_documents(element: Any) -> dict[str, Any]:
    """An element's flat columns as parsed records of one document each."""
    import tensorflow as tf

    documents = dict(element)
    documents["input_ids"] = tf.RaggedTensor.from_row_lengths(
        element["input_ids"], element["length"], validate=False
    )
    return documents
