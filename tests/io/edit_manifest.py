#!/usr/bin/python3
"""Edits a sharded checkpoint's manifest.json as a hostile user would, and rewrites
manifest.crc32c to match, so only dtrain's own field checks stand between the edit and a run.
    edit_manifest.py FOLDER KEY=JSON_VALUE ... (KEY may be a path: model.n_head,
    files.0.slices.1.offsets; a path ending in "+" appends to a list)"""
import json
import sys


def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


folder = sys.argv[1]
man = json.load(open(folder + "/manifest.json"))
for edit in sys.argv[2:]:
    key, value = edit.split("=", 1)
    obj = man
    path = key.split(".")
    for k in path[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    last = path[-1]
    if isinstance(obj, list) and last == "+":  # append
        obj.append(json.loads(value))
    else:
        obj[int(last) if isinstance(obj, list) else last] = json.loads(value)
text = json.dumps(man, indent=1).encode()
open(folder + "/manifest.json", "wb").write(text)
open(folder + "/manifest.crc32c", "w").write("%08x\n" % crc32c(text))
