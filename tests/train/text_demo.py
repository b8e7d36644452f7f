#!/usr/bin/python3
"""The text-conditioned DiT's demo data and its judge.

  text_demo.py make DIR [VIDEOS_PER_PROMPT]
      captioned mp4 files (libx264 through the ffmpeg command, 96x96, 8 frames at 8 fps) of
      one shape of a colour, a kind and a way of moving each: "a red disc moving left"; the
      held-out prompts get none
  text_demo.py prompts
      the held-out prompts, one a line
  text_demo.py seen
      for each held-out prompt the training prompt of its colour and kind with the next way
      (the same words, seen together in training), one a line
  text_demo.py check-clips FOLDER
      the classifier on prepare --video's clip shards against their captions (every clip)
  text_demo.py score SAMPLES.safetensors PROMPT [SAMPLES.safetensors PROMPT ...]
      the classifier on sampled clips (dtrain sample --out X.safetensors: [K, 3, T, H, W] in
      [-1, 1]) against their prompts: the share right of colour, kind and way
  text_demo.py prior MODEL.safetensors
      what a trained model expects from a caption alone: its prediction at t = 1 (pure noise,
      where the best guess is the mean clip of the caption) for each held-out prompt's colour
      and kind with every way, loaded into tests/models/torch_dit.py's independent DiT; the
      mean image's centre from the first frame to the last, per way (the training clips':
      about 6 px the caption's way)

The classifier reads pixels only: the shape is the largest part of the pixels far from the
background, its colour the nearest named colour to their mean, its kind the template (a
square, disc or diamond filling its bounding box) it overlaps most, its way how its centre
moves from the first frame to the last.
"""
import glob
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import st  # noqa: E402

COLOURS = {"red": (255, 40, 40), "green": (40, 220, 40), "blue": (60, 80, 255),
           "yellow": (240, 230, 40)}
KINDS = ("square", "disc", "diamond")
WAYS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
SIDE, FRAMES, FPS = 96, 8, 8  # the source videos: 96x96, one 8-frame clip each at 8 fps
# half-sizes and pixels a frame at 96x96: 5.5-7.5 px at the demo's 24x24. At 4.5-6.5 a diamond
# was 40-85 pixels whose tips the downscale blurs, and a model of 10 minutes drew it as a disc
# (kind 0.36 on held-out prompts; 1.00 at these sizes, bench/results/text_demo_size_2026-11-29.md)
R_MIN, R_MAX, SPEED_MIN, SPEED_MAX = 22, 30, 3.0, 4.0


def prompts():
    """Every (colour, kind, way) and whether it is held out: 8 of the 48, chosen so that
    every colour, kind and way is still seen in training, only not together."""
    out = []
    for ci, c in enumerate(COLOURS):
        for ki, k in enumerate(KINDS):
            for wi, w in enumerate(WAYS):
                out.append((f"a {c} {k} moving {w}", (ci + 2 * ki + 3 * wi) % 6 == 0))
    return out


def draw(colour, kind, way, r, x0, y0, speed):
    """FRAMES frames [F, SIDE, SIDE, 3] uint8 of the shape moving from (x0, y0)."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE] + 0.5
    out = np.zeros((FRAMES, SIDE, SIDE, 3), np.uint8)
    dx, dy = WAYS[way]
    for f in range(FRAMES):
        cx, cy = x0 + dx * speed * f, y0 + dy * speed * f
        ax, ay = np.abs(xx - cx), np.abs(yy - cy)
        inside = {"square": (ax <= r) & (ay <= r), "disc": ax * ax + ay * ay <= r * r,
                  "diamond": ax + ay <= r}[kind]
        out[f][inside] = COLOURS[colour]
    return out


def make(d, per_prompt):
    rng = np.random.RandomState(7)
    os.makedirs(d, exist_ok=True)
    n = 0
    for caption, held in prompts():
        if held:
            continue
        _, colour, kind, _, way = caption.split()
        for v in range(per_prompt):
            r = rng.uniform(R_MIN, R_MAX)
            speed = rng.uniform(SPEED_MIN, SPEED_MAX)
            travel = speed * (FRAMES - 1)
            lo, hi = r + 1, SIDE - r - 1
            dx, dy = WAYS[way]
            # start where the whole path stays inside the frame
            x0 = rng.uniform(lo + max(0, -dx) * travel, hi - max(0, dx) * travel)
            y0 = rng.uniform(lo + max(0, -dy) * travel, hi - max(0, dy) * travel)
            frames = draw(colour, kind, way, r, x0, y0, speed)
            path = os.path.join(d, f"{n:04d}.mp4")
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                            "-s", f"{SIDE}x{SIDE}", "-r", str(FPS), "-i", "-", "-c:v", "libx264",
                            "-pix_fmt", "yuv420p", "-crf", "18", path],
                           input=frames.tobytes(), check=True)
            with open(os.path.join(d, f"{n:04d}.txt"), "w") as f:
                f.write(caption + "\n")
            n += 1
    print(f"{n} videos of {sum(not h for _, h in prompts())} prompts in {d}")


def largest_part(mask):
    """The largest 4-connected part of a [H, W] mask (a sample's stray pixels are not the
    shape's)."""
    seen = np.zeros_like(mask)
    best = np.zeros_like(mask)
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        part, todo = [], [(y0, x0)]
        seen[y0, x0] = True
        while todo:
            y, x = todo.pop()
            part.append((y, x))
            for v, u in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= v < mask.shape[0] and 0 <= u < mask.shape[1] and mask[v, u] and \
                        not seen[v, u]:
                    seen[v, u] = True
                    todo.append((v, u))
        if len(part) > best.sum():
            best = np.zeros_like(mask)
            best[tuple(np.array(part).T)] = True
    return best


def kind_overlaps(part):
    """Intersection over union of a shape's pixels with the square, disc and diamond that fill
    its bounding box."""
    ys, xs = np.nonzero(part)
    cy, cx = (ys.min() + ys.max() + 1) / 2, (xs.min() + xs.max() + 1) / 2
    ry, rx = (ys.max() - ys.min() + 1) / 2, (xs.max() - xs.min() + 1) / 2
    yy, xx = np.mgrid[0:part.shape[0], 0:part.shape[1]] + 0.5
    dy, dx = np.abs(yy - cy) / ry, np.abs(xx - cx) / rx
    shapes = {"square": (dy <= 1) & (dx <= 1), "disc": dy ** 2 + dx ** 2 <= 1,
              "diamond": dy + dx <= 1}
    return {k: (part & m).sum() / (part | m).sum() for k, m in shapes.items()}


def classify(clip):
    """clip [T, H, W, 3] in [0, 1] -> (colour, kind, way), or None for one without a shape.
    The shape is each frame's largest part of the pixels far from the background: its colour
    the nearest named one to their mean, its kind the template (square, disc, diamond filling
    its bounding box) it overlaps most over the frames, its way how its centre moves from the
    first frame to the last."""
    parts = [largest_part(frame.max(axis=2) > 0.45) for frame in clip]
    if parts[0].sum() < 3 or parts[-1].sum() < 3:
        return None
    mean = np.concatenate([f[p] for f, p in zip(clip, parts)]).mean(axis=0) * 255
    colour = min(COLOURS, key=lambda c: np.sum((mean - np.array(COLOURS[c])) ** 2))
    overlap = {k: 0.0 for k in KINDS}
    for part in parts:
        if part.sum() >= 3:
            for k, v in kind_overlaps(part).items():
                overlap[k] += v
    kind = max(KINDS, key=lambda k: overlap[k])
    c0 = np.array(np.nonzero(parts[0])).mean(axis=1)
    c1 = np.array(np.nonzero(parts[-1])).mean(axis=1)
    dy, dx = c1 - c0
    way = (("left" if dx < 0 else "right") if abs(dx) >= abs(dy) else
           ("up" if dy < 0 else "down"))
    return colour, kind, way


def judge(clips, captions):
    """The share of clips whose colour, kind and way are the caption's; prints them."""
    right = np.zeros(3)
    for clip, cap in zip(clips, captions):
        got = classify(clip)
        _, colour, kind, _, way = cap.split()
        if got:
            right += np.array([got[0] == colour, got[1] == kind, got[2] == way])
    share = right / max(len(clips), 1)
    print(f"{len(clips)} clips: colour {share[0]:.3f}, kind {share[1]:.3f}, way {share[2]:.3f}")
    return share


def check_clips(folder):
    clips, caps = [], []
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        t, _ = st.read_safetensors(path)
        text = bytes(t["caption"].astype(np.uint8))
        ends = [0] + list(t["caption_end"])
        for i in range(t["pixels"].shape[0]):
            clips.append(t["pixels"][i].astype(np.float32) / 255)
            caps.append(text[ends[i]:ends[i + 1]].decode().strip())
    share = judge(clips, caps)
    return bool((share >= 0.95).all())


def score(pairs):
    """pairs: (samples.safetensors, prompt): latents [K, 3, T, H, W] in about [-1, 1], all K
    clips sampled for that prompt."""
    clips, caps = [], []
    for path, prompt in pairs:
        x = st.read_safetensors(path)[0]["latents"]
        got = np.clip((x.transpose(0, 2, 3, 4, 1) + 1) / 2, 0, 1)
        print(f"  {prompt}: {[classify(c) for c in got]}")
        clips += list(got)
        caps += [prompt] * len(got)
    return judge(clips, caps)


def prior(path):
    import torch
    import torch_dit as TD
    tensors, meta = st.read_safetensors(path)
    meta = dict(meta, attn=("full", "spatial_temporal")[int(meta["attn"])])
    cfg = TD.DiTConfig.from_metadata(meta)
    model = TD.DiT(cfg).double()
    model.load_state_dict(TD.state_dict_from_dtrain(tensors, model, prefix=""))
    noise = torch.randn(16, cfg.frames, cfg.channels, cfg.height, cfg.width,
                        generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    grid = np.mgrid[0:cfg.height, 0:cfg.width]
    for way in WAYS:
        moves = []
        for p, held in prompts():
            if not held:
                continue
            caption = " ".join(p.split()[:4] + [way]).encode()
            text = torch.zeros(16, cfg.text_row, dtype=torch.float64)
            text[:, 0] = len(caption)
            text[:, 1:1 + len(caption)] = torch.tensor(list(caption), dtype=torch.float64)
            with torch.no_grad():  # x_0 = x_1 - v(x_1, 1)
                mean = (noise - model(noise, torch.ones(16, dtype=torch.float64), None, text))
            a = mean.mean(2).numpy()  # [16, T, H, W], the shape far from the background
            a = a - a.min(axis=(2, 3), keepdims=True)
            centre = [(a[:, f, None] * grid[None]).sum((2, 3)) / a[:, f].sum((1, 2))[:, None]
                      for f in (0, -1)]
            moves.append((centre[1] - centre[0]).mean(0))
        dy, dx = np.mean(moves, 0)
        print(f"  {way:5s}: the mean clip's centre moves {dx:+.1f} px across, {dy:+.1f} down")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 6)
    elif cmd == "prompts":
        print("\n".join(p for p, held in prompts() if held))
    elif cmd == "seen":
        trained = {p for p, held in prompts() if not held}
        ways = list(WAYS)
        for p, held in prompts():
            if held:
                words = p.split()
                i = ways.index(words[4])
                for step in range(1, 4):
                    q = " ".join(words[:4] + [ways[(i + step) % 4]])
                    if q in trained:
                        print(q)
                        break
    elif cmd == "check-clips":
        sys.exit(0 if check_clips(sys.argv[2]) else 1)
    elif cmd == "score":
        score(list(zip(sys.argv[2::2], sys.argv[3::2])))
    elif cmd == "prior":
        prior(sys.argv[2])
    else:
        sys.exit(__doc__)
