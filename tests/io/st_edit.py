#!/usr/bin/python3
"""Makes hostile variants of a safetensors file for tests/train/bad_inputs.sh.
    st_edit.py IN OUT meta KEY VALUE       set a __metadata__ entry
    st_edit.py IN OUT nometa               drop __metadata__
    st_edit.py IN OUT extra NAME           add a 1-element F32 tensor NAME at the end
    st_edit.py IN OUT nan NAME             the first element of F32 tensor NAME becomes NaN
    st_edit.py IN OUT hlen DELTA           the header length field plus DELTA, nothing else
    st_edit.py IN OUT trailing N           N zero bytes appended"""
import json
import struct
import sys

src, dst, op = sys.argv[1:4]
args = sys.argv[4:]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])


def write(h, d, delta=0):
    text = json.dumps(h).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(text) + delta) + text + bytes(d))


if op == "meta":
    hdr.setdefault("__metadata__", {})[args[0]] = args[1]
    write(hdr, data)
elif op == "nometa":
    hdr.pop("__metadata__", None)
    write(hdr, data)
elif op == "extra":
    hdr[args[0]] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    write(hdr, data + struct.pack("<f", 1.0))
elif op == "nan":
    begin = hdr[args[0]]["data_offsets"][0]
    data[begin:begin + 4] = struct.pack("<f", float("nan"))
    write(hdr, data)
elif op == "hlen":
    open(dst, "wb").write(struct.pack("<Q", n + int(args[0])) + raw[8:])
elif op == "trailing":
    open(dst, "wb").write(raw + b"\0" * int(args[0]))
else:
    sys.exit("unknown op " + op)
