"""Packs a folder of images, one subfolder per class (torchvision's ImageFolder layout, as
examples/images/make_images.py writes it), into WebDataset-style tar shards for
data.shards:

    make_shards.py FOLDER PREFIX [--per-shard N] [--json] [--no-shuffle]
        PREFIX-0000.tar, PREFIX-0001.tar, ...: N samples a shard (default 1000), each the
        members KEY.jpg (or .png, as stored) and KEY.cls (the class index as text; with
        --json, KEY.json holding {"label": N}). Classes are numbered in sorted order of
        their folders' names, as data.images numbers them. Samples are shuffled before
        packing (seed 0), as WebDataset advises: a shard of one class would defeat the
        shuffle buffer. Prints the brace pattern naming the shards.

Only Python's standard library is needed.
"""
import io
import json
import random
import sys
import tarfile
from pathlib import Path

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def pack(folder, prefix, per_shard=1000, as_json=False, shuffle=True):
    classes = sorted(p.name for p in Path(folder).iterdir() if p.is_dir() and p.name[0] != ".")
    samples = []
    for label, name in enumerate(classes):
        for path in sorted((Path(folder) / name).rglob("*")):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                samples.append((path, label))
    if not samples:
        sys.exit(f"{folder}: no images in class subfolders")
    if shuffle:
        random.Random(0).shuffle(samples)
    shards = (len(samples) + per_shard - 1) // per_shard
    width = max(4, len(str(shards - 1)))
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with tarfile.open(f"{prefix}-{s:0{width}d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (path, label) in enumerate(samples[s * per_shard:(s + 1) * per_shard]):
                key = f"{s * per_shard + i:08d}"
                add(tar, key + path.suffix.lower(), path.read_bytes())
                if as_json:
                    add(tar, key + ".json", json.dumps({"label": label}).encode())
                else:
                    add(tar, key + ".cls", str(label).encode())
    print(f"{prefix}-{{{0:0{width}d}..{shards - 1:0{width}d}}}.tar")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    per_shard, as_json, shuffle = 1000, False, True
    rest = argv[2:]
    while rest:
        flag = rest.pop(0)
        if flag == "--per-shard":
            per_shard = int(rest.pop(0))
        elif flag == "--json":
            as_json = True
        elif flag == "--no-shuffle":
            shuffle = False
        else:
            sys.exit(f"unknown flag {flag}\n{__doc__}")
    pack(argv[0], argv[1], per_shard, as_json, shuffle)


if __name__ == "__main__":
    main(sys.argv[1:])
