"""Generated sample data: photo-like images in class folders, for the demo, tests and benchmarks.

Nothing can be downloaded at run time, so the built-in default dataset is made here: seeded
gradients with noise and a few shapes, saved as real JPEGs of realistic size and entropy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

CLASS_NAMES = ("cat", "dog", "fox", "owl", "yak", "emu", "elk", "bee")


def make_image(seed: int, width: int, height: int) -> object:
    """One seeded, photo-like RGB image (a Pillow Image)."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    a, b, c = rng.uniform(0, 255, (3, 1, 1, 3)).astype(np.float32)
    pixels = a * (1 - x) * (1 - y) + b * x + c * y * (1 - x)
    pixels += rng.normal(0, 12, (height, width, 3)).astype(np.float32)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        r = int(rng.integers(max(2, min(width, height) // 16), max(3, min(width, height) // 3)))
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((x0 - r, y0 - r, x0 + r, y0 + r), fill=color)
        else:
            draw.rectangle((x0 - r, y0 - r, x0 + r, y0 + r), fill=color)
    return img


def write_sample_images(
    out_dir: str,
    *,
    num_classes: int = 4,
    images_per_class: int = 50,
    sizes: Sequence[tuple[int, int]] = ((500, 375), (375, 500), (320, 240), (640, 480)),
    splits: Sequence[str] = (),
    seed: int = 0,
    quality: int = 90,
) -> int:
    """Write `out_dir/[SPLIT/]CLASS/NNNNN.jpg`; returns how many images were written.

    Args:
        splits: if given, images are spread round-robin over these split folders.
    """
    count = 0
    for c in range(num_classes):
        name = CLASS_NAMES[c] if c < len(CLASS_NAMES) else f"class_{c:03d}"
        for i in range(images_per_class):
            width, height = sizes[(c + i) % len(sizes)]
            folder = (
                os.path.join(out_dir, splits[i % len(splits)], name)
                if splits
                else os.path.join(out_dir, name)
            )
            os.makedirs(folder, exist_ok=True)
            count += 1
            target = os.path.join(folder, f"{i:05d}.jpg")
            if os.path.exists(target):  # same seed, same image: keep mtimes, so re-runs are no-ops
                continue
            img = make_image(seed * 1_000_003 + c * 10_007 + i, width, height)
            img.save(target, "JPEG", quality=quality)  # type: ignore[attr-defined]
    return count


def make_default_dataset(
    workdir: str, *, num_classes: int = 4, images_per_class: int = 128, quiet: bool = True
) -> str:
    """bench-input's built-in data: a generated sample image folder, converted; returns its path.

    Nothing can be downloaded, so the default is made here: photo-like JPEGs of typical sizes
    (320x240 to 640x480), which cost the host what real photos of those sizes cost.
    """
    from feedgpu.converters.images import convert_images

    src, out = os.path.join(workdir, "images"), os.path.join(workdir, "dataset")
    write_sample_images(src, num_classes=num_classes, images_per_class=images_per_class)
    convert_images(src, out, quiet=quiet)
    return out
