"""tensorflow-text's fast WordPiece and BERT normaliser models, built once and kept on disk.

`FastBertTokenizer`, given a vocabulary, builds both models (flatbuffers) each time it is made,
then copies each into a tensor through a Python list of its bytes. At the start of every
conversion, with the GIL held, that took 0.5 s for an 8k vocabulary, 0.8 s for BERT's 30k and
1.5 s for a 120k multilingual one (benchmarks/RESULTS.md, "Issue 29: the tokenizer's models").
Here each model is built once, kept in the user's cache folder under a key of everything it
depends on (tensorflow-text's version, the vocabulary, the settings), checked by its digest
when read back, and made into a tensor from numpy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from feedgpu import storage

logger = logging.getLogger(__name__)
CACHE_ENV = "FEEDGPU_CACHE_DIR"


def cache_dir() -> str | None:
    """Where built models are kept: $FEEDGPU_CACHE_DIR (set but empty: nowhere), else
    $XDG_CACHE_HOME/feedgpu, else ~/.cache/feedgpu."""
    if CACHE_ENV in os.environ:
        return os.environ[CACHE_ENV] or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "feedgpu")


def fast_bert_tokenizer(
    vocab: Sequence[str], suffix: str, max_bytes: int, unknown: str, lowercase: bool
) -> Any:
    """tensorflow-text's `FastBertTokenizer` (int64 ids) from kept or freshly built models."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text as tf_text

    from feedgpu.tf_private import fast_model_builders

    build_wordpiece, build_normalizer = fast_model_builders()
    version = tf_text.__version__
    wordpiece = _kept(
        ["wordpiece", version, list(vocab), suffix, max_bytes, unknown],
        lambda: build_wordpiece(list(vocab), max_bytes, suffix, unknown, False, False),
    )
    normalizer = _kept(["normalizer", version, lowercase], lambda: build_normalizer(lowercase))
    return tf_text.FastBertTokenizer(
        token_out_type=tf.int64,
        fast_wordpiece_model_buffer=tf.constant(np.frombuffer(wordpiece, np.uint8)),
        fast_bert_normalizer_model_buffer=tf.constant(np.frombuffer(normalizer, np.uint8)),
    )


def _kept(key: list[Any], build: Callable[[], bytes]) -> bytes:
    """The model the key names: read from the cache folder if kept there intact, else built
    (and kept, where the folder can be written)."""
    folder = cache_dir()
    if folder is None:
        return bytes(build())
    digest = hashlib.sha256(json.dumps(key, ensure_ascii=False).encode()).hexdigest()
    path = os.path.join(folder, "tensorflow-text", f"{key[0]}-{digest[:32]}.fb")
    try:
        with open(path, "rb") as f:
            kept = f.read()
        body = kept[32:]
        if hashlib.sha256(body).digest() == kept[:32]:
            return body
        logger.debug("%s: damaged, built again", path)
    except OSError:
        pass
    body = bytes(build())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        storage.write_atomic(path, hashlib.sha256(body).digest() + body)
    except OSError as e:  # a read-only home: built each time, as without a cache
        logger.debug("could not keep %s: %s", path, e)
    return body
