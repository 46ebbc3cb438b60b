"""What an image conversion says of its inputs beyond skipping them: a class a split has no
image of, a dataset of one class, images that changed while the conversion ran."""

from __future__ import annotations

import logging
from collections import Counter

from feedgpu import storage
from feedgpu.convert.plan import DatasetPlan
from feedgpu.converters.listing import SourceFile
from feedgpu.format import names

logger = logging.getLogger(__name__)


def say_thin_classes(labelled: list[tuple[str, SourceFile, str]], labels: list[str]) -> None:
    """Warn of a dataset with one class (nothing to tell apart), and of a class a split has
    none of: a hash split places each image by its path alone, so a class of 5 images lands
    wholly in train a third of the time at 20% validation."""
    if len(labels) == 1:
        logger.warning(
            "one class only (%r): a classifier has nothing to tell apart; put each class in a "
            "folder of its own under SRC",
            labels[0],
        )
    splits = sorted({s for s, _, _ in labelled}, key=names.split_order)
    held = Counter((s, label) for s, _, label in labelled)
    for split in splits if len(labels) > 1 else ():
        missing = [label for label in labels if not held[split, label]]
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
            logger.warning(
                "the %s split holds no image of %d class(es): %s; give those classes more "
                "images, or lay out the splits as folders (SRC/%s/CLASS/...)",
                split,
                len(missing),
                shown,
                split,
            )


def say_changed_inputs(plan: DatasetPlan) -> None:
    """Warn when images changed size after they were read: the dataset holds them as first
    read, and the next run of the same command refuses (the input files changed)."""
    if storage.is_remote(plan.source):  # a request a file on an object store: not worth it
        return
    changed = []
    for task in plan.tasks:
        for _, path, _, size in task.items:
            try:
                if storage.file_size(path) != size:
                    changed.append(path)
            except OSError:
                changed.append(path)
    if changed:
        logger.warning(
            "%d image(s) changed while the conversion ran (first: %s): the dataset holds them "
            "as first read; re-run with --overwrite when the folder is settled",
            len(changed),
            changed[0],
        )
