"""Tiny safetensors and llm.c token-shard reader/writer (json + numpy + struct only).

Used by tests/models/torch_ref.py and bench/*.py; no `safetensors` package needed.
  read_safetensors(path)            -> (dict name -> float32 ndarray, metadata dict)
  write_safetensors(path, tensors, metadata, dtype="F32"|"BF16")
  read_tokens(path) -> uint16 ndarray;  write_tokens(path, tokens)
Errors in the files raise FormatError with a message naming the file.
"""
import json
import struct

import numpy as np

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256

_NUMPY_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16,
                 "I32": np.int32, "I64": np.int64, "U16": np.uint16, "U8": np.uint8}


class FormatError(Exception):
    """A file that is missing, truncated or not in the expected format."""


def bf16_to_f32(raw):
    """uint16 bit patterns of bfloat16 -> float32 array (exact)."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even (NaN kept)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def _read_header(path, blob):
    if len(blob) < 8:
        raise FormatError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise FormatError(f"{path}: header length {n} exceeds file size {len(blob)}")
    try:
        return json.loads(blob[8:8 + n].decode("utf-8")), 8 + n
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: bad JSON header: {e}")


def _decode_tensor(path, name, info, data):
    dtype, shape = info.get("dtype"), info.get("shape")
    begin, end = info.get("data_offsets", (None, None))
    if begin is None or end is None or not 0 <= begin <= end <= len(data):
        raise FormatError(f"{path}: tensor {name}: bad data_offsets")
    raw = data[begin:end]
    count = int(np.prod(shape)) if shape else 1
    if dtype == "BF16":
        arr = bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
    elif dtype in _NUMPY_DTYPES:
        arr = np.frombuffer(raw, dtype=np.dtype(_NUMPY_DTYPES[dtype]).newbyteorder("<"))
    else:
        raise FormatError(f"{path}: tensor {name}: unsupported dtype {dtype}")
    if arr.size != count:
        raise FormatError(f"{path}: tensor {name}: {arr.size} elements, shape {shape}")
    return arr.reshape(shape)


def read_safetensors(path):
    """Return ({name: ndarray}, metadata). Floating tensors come back as float32
    (F64 stays float64)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise FormatError(f"{path}: cannot read: {e.strerror}")
    header, start = _read_header(path, blob)
    meta = header.pop("__metadata__", None) or {}
    data = memoryview(blob)[start:]
    tensors = {}
    for name, info in header.items():
        arr = _decode_tensor(path, name, info, data)
        if arr.dtype == np.float16:
            arr = arr.astype(np.float32)
        tensors[name] = np.array(arr)  # own the memory, native byte order
    return tensors, meta


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    """Write {name: array} as F32 or BF16, metadata as a string map."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name], dtype=np.float32)
        raw = (f32_to_bf16(arr) if dtype == "BF16" else arr).astype(
            "<u2" if dtype == "BF16" else "<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def read_tokens(path):
    """Read an llm.c shard: 256 int32 header (magic, version, count), then uint16 tokens."""
    try:
        with open(path, "rb") as f:
            head = f.read(SHARD_HEADER_INTS * 4)
            body = f.read()
    except OSError as e:
        raise FormatError(f"{path}: cannot read: {e.strerror}")
    if len(head) < SHARD_HEADER_INTS * 4:
        raise FormatError(f"{path}: shorter than the 1024-byte shard header")
    magic, version, count = struct.unpack("<3i", head[:12])
    if magic != SHARD_MAGIC:
        raise FormatError(f"{path}: bad magic {magic} (want {SHARD_MAGIC})")
    if version != SHARD_VERSION:
        raise FormatError(f"{path}: unsupported version {version}")
    if count < 0 or len(body) < 2 * count:
        raise FormatError(f"{path}: header says {count} tokens, file holds {len(body) // 2}")
    return np.frombuffer(body[:2 * count], dtype="<u2").astype(np.int64)


def write_tokens(path, tokens):
    """Write uint16 tokens as an llm.c shard."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 65535):
        raise ValueError("tokens must fit in uint16")
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, tokens.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
