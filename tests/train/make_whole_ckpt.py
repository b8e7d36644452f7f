"""Writes a checkpoint in the whole format of older dtrain (model.safetensors, optim.safetensors,
state.json) from a one-process sharded step folder and its weights as one HF file, so the
tests can check that such a checkpoint still resumes.
    make_whole_ckpt.py SHARDED_STEP_FOLDER WEIGHTS.safetensors OUT_FOLDER"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
import numpy as np  # noqa: E402
import st  # noqa: E402

src, weights, out = sys.argv[1:4]
man = json.load(open(os.path.join(src, "manifest.json")))
assert len(man["files"]) == 1, "a one-process checkpoint"
tensors, _ = st.read_safetensors(os.path.join(src, man["files"][0]["file"]))
shapes = {t["name"]: t["shape"] for t in man["tensors"]}
optim = {}
for s in man["files"][0]["slices"]:
    name = s["tensor"]
    assert s["first"] == 0 and s["count"] == int(np.prod(shapes[name])), "whole tensors"
    for kind in ("exp_avg", "exp_avg_sq"):
        optim[f"{kind}.{name}"] = tensors[f"{kind}.{name}"].reshape(shapes[name])
os.makedirs(out, exist_ok=True)
shutil.copy(weights, os.path.join(out, "model.safetensors"))
st.write_safetensors(os.path.join(out, "optim.safetensors"), optim)
keys = ("step", "data_pos", "data_step", "adam_steps", "loss_scale", "loss_scale_clean_steps",
        "skipped_steps", "seed")
json.dump({k: man[k] for k in keys}, open(os.path.join(out, "state.json"), "w"))
