"""Writes the example data sets of data.arrays, as a team's own arrays would arrive.

    /usr/bin/python3 examples/arrays/make_arrays.py [FOLDER]

FOLDER (default: .stoke/datasets/arrays, beneath the quickstart coordinator's data root)
receives:
- fashion-mnist-{train,test}-{images,labels}.npy: Debian's Fashion-MNIST as NumPy arrays,
  images uint8 [N, 28, 28, 1] (height, width, channels: as images saved from NumPy often
  are) and labels uint8 [N];
- regression.safetensors: a tabular regression set, tensors "features" float16 [N, 16] and
  "target" float32 [N] (a noisy smooth function of the features).
Needs NumPy only (Debian's python3-numpy).
"""
import gzip
import json
import struct
import sys
from pathlib import Path

import numpy as np

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path) -> np.ndarray:
    """An idx file (MNIST's format), plain or gzipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(name: str) -> Path:
    for candidate in (FASHION_MNIST / name, FASHION_MNIST / (name + ".gz")):
        if candidate.exists():
            return candidate
    sys.exit(f"{FASHION_MNIST / name}: not found (apt-get install dataset-fashion-mnist)")


def write_safetensors(path: Path, tensors: dict) -> None:
    """The safetensors format by its specification: a JSON header, then the raw tensors."""
    names = {np.float16: "F16", np.float32: "F32", np.int64: "I64", np.uint8: "U8"}
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": names[array.dtype.type], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else root / ".stoke" / "datasets" / "arrays"
    folder.mkdir(parents=True, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(find(f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
        np.save(folder / f"fashion-mnist-{split}-images.npy", images[..., None])
        np.save(folder / f"fashion-mnist-{split}-labels.npy", labels)

    rng = np.random.default_rng(7)
    features = rng.standard_normal((20000, 16)).astype(np.float32)
    target = np.sin(features[:, 0]) + 0.5 * features[:, 1] * features[:, 2] + 0.1 * features[:, 3:].sum(1)
    target += 0.05 * rng.standard_normal(len(target))
    write_safetensors(folder / "regression.safetensors",
                      {"features": features.astype(np.float16), "target": target.astype(np.float32)})
    print(f"wrote the example arrays to {folder}")


if __name__ == "__main__":
    main()
