#!/usr/bin/python3
"""Video files for dtrain prepare --video, made by FFmpeg's own encoder (the ffmpeg command)
from frames numpy draws, and checks of what dtrain wrote against those frames.

  video_clips.py make DIR          the videos (and broken files) under DIR
  video_clips.py check OUT         OUT/train and OUT/val against the frames (exit 1 on a fault)
  video_clips.py latents OUT DIR   the clips of OUT/train as latents [N, 3, T, H, W] F32 in DIR
  video_clips.py latents4 DIR      random 4-channel latents [6, 4, 4, 8, 8] BF16 in DIR
  video_clips.py latents4text DIR  the same with text embeddings [6, 3, 8] F16 and text_len

Frame n of a file is one flat colour, colour(file, n), with white bars on the sides that a
centre cut at the clips' aspect removes, so every pixel of a clip says which source frame it
came from. The clips are 4 frames of 16x16 at 8 frames a second.
"""
import glob
import json
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import st  # noqa: E402


# name: (encoder arguments, width, height, source fps, frames, bars, tolerance, caption)
VIDEOS = {
    "a/left.mp4": (["-c:v", "libx264", "-pix_fmt", "yuv420p"], 64, 48, 24, 48, "sides", 8,
                   "a red square moving left"),
    "b.webm": (["-c:v", "libvpx-vp9", "-crf", "20", "-b:v", "0", "-pix_fmt", "yuv420p"],
               48, 64, 24, 36, "top", 8, "a blue disc moving up"),
    "c.mkv": (["-c:v", "ffv1"], 40, 40, 12, 24, None, 2, None),
    "d.gif": (["-filter_complex", "split[a][b];[a]palettegen[p];[b][p]paletteuse=dither=none"],
              40, 32, 10, 20, "sides", 4, "a green diamond"),
    "z.mp4": (["-c:v", "libx264", "-pix_fmt", "yuv420p"], 64, 36, 24, 24, "sides", 8,
              "the held-out clip"),
}
FRAMES, SIZE, FPS = 4, 16, 8


def colour(name, n):
    k = sorted(VIDEOS).index(name)
    return np.array([(40 + 23 * k + 9 * n) % 256, (200 - 7 * n) % 256, (60 + 31 * k + 5 * n) % 256])


def frames(name):
    args, w, h, fps, count, bars, tol, cap = VIDEOS[name]
    f = np.zeros((count, h, w, 3), np.uint8)
    for n in range(count):
        f[n] = colour(name, n)
        if bars == "sides":
            f[n, :, :4] = 255
            f[n, :, -4:] = 255
        elif bars == "top":
            f[n, :4] = 255
            f[n, -4:] = 255
    return f


def encode(path, name, extra=()):
    args, w, h, fps = VIDEOS[name][:4]
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
                    f"{w}x{h}", "-r", str(fps), "-i", "-", *args, *extra, path],
                   input=frames(name).tobytes(), check=True)


def make(d):
    for name, spec in VIDEOS.items():
        path = os.path.join(d, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        encode(path, name)
        if spec[7] is not None:
            with open(os.path.splitext(path)[0] + ".txt", "w") as f:
                f.write("  " + spec[7] + "\n")
    # broken files: random bytes, an empty file, an mp4 cut short, one too short for a clip
    with open(os.path.join(d, "junk.mp4"), "wb") as f:
        f.write(np.random.RandomState(1).bytes(5000))
    open(os.path.join(d, "empty.webm"), "wb").close()
    encode(os.path.join(d, "trunc.mp4"), "a/left.mp4", ["-movflags", "+faststart"])
    with open(os.path.join(d, "trunc.mp4"), "rb+") as f:
        f.truncate(os.path.getsize(os.path.join(d, "trunc.mp4")) * 6 // 10)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
                    "64x48", "-r", "24", "-i", "-", "-c:v", "libx264", os.path.join(d, "short.mp4")],
                   input=frames("a/left.mp4")[:3].tobytes(), check=True)
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("not a video: a text file is a caption and never read as one\n")


def shards(folder):
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        t, meta = st.read_safetensors(path)
        if meta.get("format") != "dtrain-clips" or float(meta.get("fps")) != FPS:
            raise SystemExit(f"{path}: metadata {meta}")
        cap, src = bytes(t["caption"].astype(np.uint8)), bytes(t["source"].astype(np.uint8))
        ce, se = [0] + list(t["caption_end"]), [0] + list(t["source_end"])
        for i in range(t["pixels"].shape[0]):
            out.append((t["pixels"][i], cap[ce[i]:ce[i + 1]].decode(),
                        src[se[i]:se[i + 1]].decode(), int(t["start_ms"][i])))
    return out


def expected(names):
    """(name, clip index in the file, source frame numbers) of every clip, in order"""
    out = []
    for name in names:
        fps, count = VIDEOS[name][3], VIDEOS[name][4]
        sampled = int(count / fps * FPS + 1e-9)  # output frames the file lasts
        for c in range(sampled // FRAMES):
            ks = range(c * FRAMES, (c + 1) * FRAMES)
            out.append((name, c, [int(k * fps / FPS + 1e-9) for k in ks]))
    return out


def check(out):
    faults = []
    for split, names in (("train", ["a/left.mp4", "b.webm", "c.mkv", "d.gif"]),
                         ("val", ["z.mp4"])):
        got, want = shards(os.path.join(out, split)), expected(names)
        if len(got) != len(want):
            faults.append(f"{split}: {len(got)} clips, want {len(want)}")
            continue
        for (px, cap, src, ms), (name, c, ns) in zip(got, want):
            spec = VIDEOS[name]
            if px.shape != (FRAMES, SIZE, SIZE, 3):
                faults.append(f"{name} clip {c}: shape {px.shape}")
                continue
            if src != name or cap != (spec[7] or "") or ms != c * FRAMES * 1000 // FPS:
                faults.append(f"{name} clip {c}: source {src!r} caption {cap!r} start {ms}")
            for f, n in enumerate(ns):
                err = np.abs(px[f].astype(int) - colour(name, n)).max()
                if err > spec[6]:
                    faults.append(f"{name} clip {c} frame {f}: source frame {n}'s colour "
                                  f"{colour(name, n)} off by {err} (corner {px[f, 0, 0]})")
    print("\n".join(faults) if faults else f"clips match their source frames")
    return not faults


def latents(out, d):
    clips = np.stack([c[0] for c in shards(os.path.join(out, "train"))])
    x = clips.astype(np.float32) / np.float32(127.5) - np.float32(1)  # [N, T, H, W, 3]
    os.makedirs(d, exist_ok=True)
    st.write_safetensors(os.path.join(d, "latents-0.safetensors"),
                         {"latents": x.transpose(0, 4, 1, 2, 3).astype(np.float32)})


def latents4(d):
    os.makedirs(d, exist_ok=True)
    x = np.random.RandomState(3).standard_normal((6, 4, 4, 8, 8)).astype(np.float32)
    st.write_safetensors(os.path.join(d, "part-a.safetensors"), {"latents": x[:4]}, dtype="BF16")
    st.write_safetensors(os.path.join(d, "part-b.safetensors"), {"latents": x[4:]}, dtype="BF16")


def write_typed(path, tensors):
    """A safetensors file of (dtype, array) per name: BF16, F16, F32 or I64 (st.py writes one
    float type for all)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        raw = {"BF16": lambda a: st.f32_to_bf16(a.astype(np.float32)).astype("<u2"),
               "F16": lambda a: a.astype("<f2"), "F32": lambda a: a.astype("<f4"),
               "I64": lambda a: a.astype("<i8")}[dtype](arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def latents4text(d):
    """latents4's clips with text embeddings as an Open-Sora pipeline writes T5's: [N, L, D]
    F16 with each clip's token count (3, 2, 1, 0, ...), in two shards."""
    os.makedirs(d, exist_ok=True)
    r = np.random.RandomState(3)
    x = r.standard_normal((6, 4, 4, 8, 8)).astype(np.float32)
    t = r.standard_normal((6, 3, 8)).astype(np.float32)
    n = np.array([3, 2, 1, 0, 3, 2], dtype=np.int64)
    for part, sl in (("a", slice(0, 4)), ("b", slice(4, 6))):
        write_typed(os.path.join(d, "part-%s.safetensors" % part),
                    {"latents": ("BF16", x[sl]), "text": ("F16", t[sl]),
                     "text_len": ("I64", n[sl])})


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2])
    elif cmd == "check":
        sys.exit(0 if check(sys.argv[2]) else 1)
    elif cmd == "latents":
        latents(sys.argv[2], sys.argv[3])
    elif cmd == "latents4":
        latents4(sys.argv[2])
    elif cmd == "latents4text":
        latents4text(sys.argv[2])
