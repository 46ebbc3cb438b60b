"""The rule for a conversion that keeps too little to be what its user meant.

A run fails (exit 1) when more inputs were skipped for one reason than were converted: one
record of 12,462 holding the `--text-field` given, an image folder given to `convert text`. Its
shards are kept in the work folder and its reasons in skipped.jsonl; the same command with
`--allow-skips` finishes the dataset at once. Hidden files (.DS_Store, .git) never count: no one
means them as inputs. A folder of images with one sidecar file each (1:1) still converts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from feedgpu.convert.plan import Skip
from feedgpu.errors import InputError

NOT_COUNTED = frozenset({"hidden"})

# What to change, for the reasons a wrong option or a wrong folder causes.
ADVICE = {
    "no text field": "name the field that holds the text with --text-field",
    "no label": "put the inputs in class folders (SRC/CLASS/...), or pass --labels FILE",
    "not a text file": "give the file or folder that holds the .txt/.jsonl corpus",
    "not an image": "give the folder that holds the images",
    "missing file": "check the label file's paths (relative to SRC)",
    "undecodable": "check the files' encoding, or pass --encoding-errors replace",
    "malformed JSON": "check that each line is one JSON object",
}


def check_kept(kept: int, skips: Iterable[Skip], out_dir: str, *, allow: bool) -> None:
    """Raise InputError when one skip reason outnumbers the inputs kept, unless allowed.

    Args:
        kept: inputs converted (images, or text documents).
    """
    counts = Counter(s.reason for s in skips if s.reason not in NOT_COUNTED)
    if allow or not counts:
        return
    reason, skipped = counts.most_common(1)[0]
    if skipped <= kept:
        return
    total = kept + sum(counts.values())
    advice = ADVICE.get(reason, "see why in skipped.jsonl")
    raise InputError(
        f"kept {kept} of {total} inputs: {skipped} skipped as {reason!r}; {advice}, or pass "
        f"--allow-skips to keep the dataset as it is (every reason: {out_dir}/skipped.jsonl)"
    )
