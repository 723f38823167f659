#!/usr/bin/python3
"""SRC DST FACTOR: copies the HF checkpoint folder SRC (config.json +
model.safetensors) to DST with every BF16 `*_proj.weight` times FACTOR, stored
as F32 (exact).  Used by the tests to put ternary scales where a dtype rounds
them differently (f16's subnormal range)."""
import json
import shutil
import struct
import sys

import numpy as np


def main(src, dst, factor):
    raw = open(f"{src}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out, blobs, off = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        s, e = t["data_offsets"]
        b, dtype = data[s:e], t["dtype"]
        if name.endswith("_proj.weight") and dtype == "BF16":
            f = (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            b, dtype = (f * np.float32(factor)).astype("<f4").tobytes(), "F32"
        out[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(out).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(f"{dst}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    shutil.copy(f"{src}/config.json", f"{dst}/config.json")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
