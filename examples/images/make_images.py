"""Writes image data sets for data.images (its example, its tests, its benchmark), with
Pillow, from Debian's Fashion-MNIST (real pictures, so that accuracy means something):

    make_images.py folder DIR PER_CLASS [--size S] [--png-every K] [--damaged N]
        DIR/train/<class>/*.jpg (every K-th a .png), DIR/val/<class>/..., PER_CLASS
        training and PER_CLASS // 5 held-out images per class, at S x S pixels (grey
        pictures saved as RGB JPEGs); N training JPEGs cut off at half their bytes; and
        DIR/train.csv, DIR/train.jsonl listing the training images (path,label).
    make_images.py photos DIR COUNT WIDTH HEIGHT
        COUNT photograph-sized RGB JPEGs of smooth random colour fields, DIR/<class>/,
        two classes, for decoding speed.
    make_images.py decode FILE
        prints Pillow's decoding of FILE as "WIDTH HEIGHT" and the RGB bytes in hex (the
        tests compare Stoke's decoding with it).
Needs Pillow and NumPy (Debian's python3-pil, python3-numpy).
"""
import gzip
import json
import struct
import sys
from pathlib import Path

import numpy as np
from PIL import Image

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
           "boot"]


def read_idx(name):
    path = FASHION_MNIST / name
    opener = open
    if not path.exists():
        path, opener = FASHION_MNIST / (name + ".gz"), gzip.open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def folder(root, per_class, size=28, png_every=0, damaged=0):
    root = Path(root)
    images, labels = read_idx("train-images-idx3-ubyte"), read_idx("train-labels-idx1-ubyte")
    rows, cut = [], 0
    for split, count, offset in (("train", per_class, 0), ("val", max(1, per_class // 5), 30000)):
        taken = {c: 0 for c in range(10)}
        for i in range(offset, len(labels)):
            c = int(labels[i])
            if taken[c] >= count:
                continue
            if all(n >= count for n in taken.values()):
                break
            n = taken[c]
            taken[c] += 1
            picture = Image.fromarray(images[i]).convert("RGB")
            if size != 28:
                picture = picture.resize((size, size), Image.BILINEAR)
            png = png_every and n % png_every == png_every - 1
            relative = Path(split) / CLASSES[c] / f"{i:05d}.{'png' if png else 'jpg'}"
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            picture.save(root / relative, quality=95)
            if split == "train":
                if not png and cut < damaged:
                    data = (root / relative).read_bytes()
                    (root / relative).write_bytes(data[:len(data) // 2])
                    cut += 1
                rows.append((str(relative), CLASSES[c]))
    with open(root / "train.csv", "w") as f:
        f.write("path,label\n")
        f.writelines(f"{p},{c}\n" for p, c in rows)
    with open(root / "train.jsonl", "w") as f:
        f.writelines(json.dumps({"path": p, "label": CLASSES.index(c)}) + "\n" for p, c in rows)


def photos(root, count, width, height):
    rng = np.random.default_rng(5)
    for i in range(count):
        small = rng.integers(0, 256, (height // 32 + 1, width // 32 + 1, 3), dtype=np.uint8)
        picture = Image.fromarray(small).resize((width, height), Image.BICUBIC)
        path = Path(root) / f"class{i % 2}" / f"{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        picture.save(path, quality=90)


def decode(path):
    picture = Image.open(path).convert("RGB")
    print(picture.width, picture.height)
    print(picture.tobytes().hex())


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "folder":
        options = {"size": 28, "png_every": 0, "damaged": 0}
        positional = []
        i = 0
        while i < len(args):
            if args[i].startswith("--"):
                options[args[i][2:].replace("-", "_")] = int(args[i + 1])
                i += 2
            else:
                positional.append(args[i])
                i += 1
        folder(positional[0], int(positional[1]), **options)
    elif command == "photos":
        photos(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif command == "decode":
        decode(args[0])
    else:
        sys.exit(f"unknown command {command}")
