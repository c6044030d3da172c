"""Build real-format safetensors files without real-sized data.

The header is written exactly as the safetensors format specifies (u64 LE length,
JSON header padded with spaces to 8 bytes, offsets contiguous from 0), and the data
region is a sparse hole: a 770 MB draft checkpoint costs a few KB of disk.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Dict, List, Tuple

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1}

# Tensors of an EAGLE-3 draft for DeepSeek-V3 as SpecForge saves it (subset).
DEEPSEEK_V3_EAGLE3_TENSORS = [
    ("d2t", "I64", [32000]),
    ("fc.weight", "BF16", [7168, 21504]),
    ("lm_head.weight", "BF16", [32000, 7168]),
    ("midlayer.hidden_norm.weight", "BF16", [7168]),
    ("midlayer.input_layernorm.weight", "BF16", [7168]),
    ("norm.weight", "BF16", [7168]),
    ("t2d", "BOOL", [129280]),
]


def write_safetensors(path: str, tensors: List[Tuple[str, str, List[int]]]) -> Dict[str, int]:
    """Write ``path``; return header_len and total size for assertions."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = DTYPE_BYTES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        if offset:
            handle.truncate(8 + len(raw) + offset)  # sparse: no data blocks
    return {"header_len": len(raw), "total": 8 + len(raw) + offset}
