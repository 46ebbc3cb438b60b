"""The rule for a conversion that keeps too little to be what its user meant.

A run fails (exit 1) when more inputs were skipped for one reason than were converted: one
record of 12,462 holding the `--text-field` given, an image folder given to `convert text`. Its
finished shards stay in OUT (no manifest: not a dataset yet), its reasons in skipped.jsonl; the
same command with `--allow-skips` finishes the dataset at once. Hidden files (.DS_Store, .git)
never count: no one means them as inputs; nor, for images, files the extension rule never
opens (an asset folder's sounds, SVGs and JSON sidecars, however many): a folder with no image
at all fails at planning instead ("no labelled images found").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from feedgpu.convert.plan import Skip
from feedgpu.errors import InputError

# Skip reasons that are not inputs which failed, by converter.
NOT_COUNTED = {"images": frozenset({"hidden", "not an image"}), "text": frozenset({"hidden"})}

# What to change, for the reasons a wrong option or a wrong folder causes, by converter.
ADVICE = {
    ("images", "no label"): "put the images in class folders (SRC/CLASS/...), or list them in "
    "the --labels file",
    ("images", "missing file"): "check the label file's paths (relative to SRC)",
    ("images", "decompression bomb"): "raise --max-pixels if these huge images are meant",
    ("images", "undecodable"): "check that these files are images (--strict names the first)",
    ("text", "no text field"): "name the field that holds the text with --text-field",
    ("text", "no label"): "put the files in class folders with --folder-labels, or name the "
    "field with --label-field",
    ("text", "not a text file"): "give the file or folder that holds the .txt/.jsonl corpus",
    ("text", "not UTF-8"): "pass --encoding NAME if the .txt files use another encoding "
    "(cp1251, koi8-r, latin-1...), or --encoding-errors replace",
    ("text", "malformed JSON"): "check that each line is one JSON object",
    ("text", "document too large"): "split the documents, or raise --max-document-mb",
}


def counted(skips: Iterable[Skip], converter: str) -> Counter[str]:
    """Skips by reason, those that are not failed inputs left out (`NOT_COUNTED`)."""
    return Counter(s.reason for s in skips if s.reason not in NOT_COUNTED[converter])


def check_kept(
    kept: int, skips: Iterable[Skip], out_dir: str, converter: str, *, allow: bool
) -> None:
    """Raise InputError when one skip reason outnumbers the inputs kept, unless allowed.

    Args:
        kept: inputs converted (images, or text documents).
        converter: "images" or "text", for what to change.
    """
    counts = counted(skips, converter)
    if allow or not counts:
        return
    reason, skipped = counts.most_common(1)[0]
    if skipped <= kept:
        return
    total = kept + sum(counts.values())
    advice = ADVICE.get((converter, reason), "see why in skipped.jsonl")
    raise InputError(
        f"kept {kept} of {total} inputs: {skipped} skipped as {reason!r}; {advice}, or pass "
        f"--allow-skips to keep the dataset as it is (every reason: {out_dir}/skipped.jsonl)"
    )
