"""Draw notebook 13's images: how many shapes does the picture hold? (seeded, nothing downloaded)

Run from the repository root (a few seconds):

    .venv/bin/python data/make_shapes.py                     # data/shapes/: the three splits
    .venv/bin/python data/make_shapes.py --fresh 500 --seed 7 --out /tmp/fresh   # in no split

Each image is 32x32 RGB on white: 1 to 6 small filled shapes (a square, a disc or a triangle,
5 to 7 pixels wide: PIL draws both end points; a random dark grey), at most one in each cell of
a 4x4 grid, placed at a random spot inside its cell. The answer is how many (one digit; a blind
guess is right 1 time in 6). The grid is the tiny VLM's patch grid (8x8-pixel patches): each
shape falls in one image token, so the count is the number of image tokens with ink. That makes
the task learnable by a model of under a million parameters in minutes, and it is still a count:
shapes, sizes, greys and places vary, and the text alone says nothing (the prompt is empty).

Files: ``shapes/shapes_{train,validation,test}.jsonl``, one row per image,
``{"image": "train/00000.png", "prompt": "", "answer": "3"}`` (the image's path is relative to
the JSONL file's folder), and the PNG files in ``shapes/{train,validation,test}/``. No image is in
two splits (compared pixel by pixel, through a hash); ``--fresh N`` draws N images in none of
them, into ``--out`` (``fresh.jsonl`` and ``fresh/``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SIZE, CELL, MAX_COUNT = 32, 8, 6
SPLITS = {"train": (2000, 0), "validation": (300, 1), "test": (500, 2)}  # (images, seed)
SHAPES = ("square", "disc", "triangle")


def draw(rng: random.Random) -> tuple[Image.Image, int]:
    """One picture and its count."""
    count = rng.randint(1, MAX_COUNT)
    per_side = SIZE // CELL
    image = Image.new("RGB", (SIZE, SIZE), "white")
    pen = ImageDraw.Draw(image)
    for cell in rng.sample(range(per_side * per_side), count):
        side = rng.randint(4, 6)
        x = (cell % per_side) * CELL + rng.randint(0, CELL - side - 1)
        y = (cell // per_side) * CELL + rng.randint(0, CELL - side - 1)
        grey = rng.randint(0, 120)
        fill, shape = (grey, grey, grey), rng.choice(SHAPES)
        if shape == "square":
            pen.rectangle((x, y, x + side, y + side), fill=fill)
        elif shape == "disc":
            pen.ellipse((x, y, x + side, y + side), fill=fill)
        else:
            pen.polygon([(x, y + side), (x + side, y + side), (x + side // 2, y)], fill=fill)
    return image, count


def key(image: Image.Image) -> str:
    return hashlib.sha1(image.tobytes()).hexdigest()


def draw_distinct(n: int, seed: int, taken: set[str]) -> list[tuple[Image.Image, int]]:
    """``n`` pictures whose pixels are in none of ``taken`` nor repeated (``taken`` grows)."""
    rng, out = random.Random(seed), []
    for _ in range(50 * n):
        image, count = draw(rng)
        if key(image) not in taken:
            taken.add(key(image))
            out.append((image, count))
            if len(out) == n:
                return out
    raise SystemExit(f"make_shapes: could not draw {n} distinct images (seed {seed})")


def write(pictures, folder: Path, name: str) -> Path:
    """``folder/name/NNNNN.png`` and ``folder/shapes_name.jsonl`` (``name.jsonl`` for fresh)."""
    (folder / name).mkdir(parents=True, exist_ok=True)
    rows = []
    for index, (image, count) in enumerate(pictures):
        path = f"{name}/{index:05d}.png"
        image.save(folder / path, optimize=True)
        rows.append({"image": path, "prompt": "", "answer": str(count)})
    jsonl = folder / (f"shapes_{name}.jsonl" if name in SPLITS else f"{name}.jsonl")
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="output folder; default data/shapes")
    parser.add_argument("--fresh", type=int, default=0, help="draw N images in no split")
    parser.add_argument("--seed", type=int, default=100, help="seed of --fresh (default 100)")
    args = parser.parse_args()
    if args.fresh < 0:
        parser.error("--fresh must be at least 0")
    taken: set[str] = set()
    splits = {name: draw_distinct(n, seed, taken) for name, (n, seed) in SPLITS.items()}
    if args.fresh:
        if args.seed in {seed for _, seed in SPLITS.values()}:
            parser.error(f"--seed {args.seed} is a split's seed; pick another")
        path = write(draw_distinct(args.fresh, args.seed, taken), Path(args.out or "."), "fresh")
        print(f"{path}: {args.fresh} images in no shipped split")
        return
    out = Path(args.out or HERE / "shapes")
    for name, pictures in splits.items():
        print(f"{write(pictures, out, name)}: {len(pictures)} images")


if __name__ == "__main__":
    main()
