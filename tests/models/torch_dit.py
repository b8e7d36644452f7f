#!/usr/bin/python3
"""Independent PyTorch video DiT (Open-Sora style) and the cross-check of dtrain's dt_dit.

The model is written here from the DiT paper (Peebles & Xie, ICCV'23) and the description in
src/models/dit.h, as torch modules - nn.Conv3d patch embedding, nn.Linear, LayerNorm without
affine + modulate, explicit softmax attention, tanh GELU, SiLU - not from dtrain's C:
  tokens  Conv3d(channels -> C, kernel = stride = patch) on the clip [B, ch, T, H, W],
          ordered (frame, row, column), plus fixed 3-D sinusoidal positions: C splits into
          three groups of 2k channels (k = C // 6) for frame, row, column; each group is
          sin(p w_i) then cos(p w_i), w_i = 10000^(-i/k); channels past 6k are 0
  c       MLP(SiLU) of the timestep features [cos(1000 t f_i), sin(1000 t f_i)],
          f_i = 10000^(-i/128), plus a label embedding (row n_classes = no label)
  block   adaLN-Zero: (shift, scale, gate) x 2 = Linear(SiLU(c)),
          x += gate1 attn(LN(x)(1 + scale1) + shift1); x += gate2 mlp(LN(x)(1 + scale2) + shift2)
          attention over the whole clip ("full"), or, alternating from block 0, within each
          frame (spatial) and across frames at each position (temporal), by reshape
  final   LN(x)(1 + scale) + shift -> Linear(C -> ch pt ph pw), unpatchified by reshape/permute
  text    (text_len Lt > 0; PixArt-alpha, Open-Sora 1.x) a sequence y [Lt, C] per clip: an MLP
          (tanh GELU) of caption-byte features (byte + position embedding of each byte and of
          its two neighbours) or of given embeddings (text_dim > 0), keys past the caption's
          length n masked out; n <= 0 (no text): the learned null sequence, every key seen.
          Each block adds, after attention and before the MLP, x += proj(MHA(q_linear(x),
          k_linear(y), v_linear(y))) over the whole clip, with no norm and no gate
dtrain stores the Conv3d weight [C, ch, pt, ph, pw] flattened as [C, ch pt ph pw]; load_dtrain
reshapes it (the only layout adapter).

  torch_dit.py --dump DUMP.safetensors [--fp64 | --matmul onednn] [--rtol 1e-4] [--perturb NAME]

DUMP comes from tests/models/dit_torch_dump (dtrain's weights, inputs - with text_len > 0 in
its metadata also the text rows, n then the bytes or embeddings -, output, loss, gradients
and AdamW-updated weights). This script redoes the step - x_t = (1 - t) x0 + t eps,
v = eps - x0, loss = mean (model(x_t) - v)^2, backward, one torch.optim.AdamW step with the
dump's hyper-parameters (weight decay on >= 2-D tensors) - in float32 or float64 and compares,
per tensor, ||dtrain - torch||_2 / ||torch||_2 (Frobenius norm over the whole tensor) <= rtol:
the output, the loss, every gradient, every updated weight and every update (w1 - w0); and
DiTConfig.flops_per_clip (the benchmark's MFU numerator) against dtrain's count.
--perturb NAME scales dtrain's tensor NAME (e.g. g.blocks.1.attn.qkv.weight) by 1.001 first:
the check must then fail (the test of the test). --matmul onednn runs the linears through
torch's bundled oneDNN, the route bench/torch_dit_step.py may time (so the benchmark's peer
computes this same model).
Exit 0 when all pass, 1 on a mismatch, 2 on bad input. bench/torch_dit_step.py imports DiT.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import torch_ref as R  # noqa: E402  (the oneDNN matmul route the benchmark may switch on)

FREQ_DIM = 256
NORM_EPS = 1e-6


class InputError(Exception):
    """Missing or invalid input: exit status 2."""


class DiTConfig:
    KEYS = ("frames", "channels", "height", "width", "patch_t", "patch_h", "patch_w",
            "n_layer", "n_head", "n_embd", "n_classes")
    # text conditioning: absent or 0 in a dump (or a caller's kw) means a model without text
    TEXT_KEYS = ("text_len", "text_dim")

    def __init__(self, attn="full", **kw):
        for k in self.KEYS:
            setattr(self, k, int(kw[k]))
        for k in self.TEXT_KEYS:
            setattr(self, k, int(kw.get(k, 0)))
            if getattr(self, k) < 0:
                raise InputError(f"{k} = {getattr(self, k)} is negative")
        if attn not in ("full", "spatial_temporal"):
            raise InputError(f"attn '{attn}' is not full or spatial_temporal")
        self.attn = attn
        for dim, p in (("frames", "patch_t"), ("height", "patch_h"), ("width", "patch_w")):
            if getattr(self, dim) % getattr(self, p):
                raise InputError(f"{dim} = {getattr(self, dim)} is not a multiple of {p}")
        if self.n_embd % self.n_head:
            raise InputError(f"n_embd = {self.n_embd} is not a multiple of n_head")
        self.grid = (self.frames // self.patch_t, self.height // self.patch_h,
                     self.width // self.patch_w)
        self.patch_dim = self.channels * self.patch_t * self.patch_h * self.patch_w

    @property
    def tokens(self):
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def text_in(self):
        """Din, the width of a text position's features: 3C (a byte and its two neighbours'
        embeddings) for caption bytes, text_dim for given embeddings"""
        return 3 * self.n_embd if self.text_dim == 0 else self.text_dim

    @property
    def text_row(self):
        """floats per clip in the text input: n, then Lt byte ids or Lt x text_dim values"""
        return 1 + self.text_len * max(self.text_dim, 1)

    @classmethod
    def from_metadata(cls, meta):
        missing = [k for k in cls.KEYS + ("attn",) if k not in meta]
        if missing:
            raise InputError(f"dump __metadata__ lacks {', '.join(missing)}")
        text = {k: meta.get(k, "0") for k in cls.TEXT_KEYS}
        return cls(attn=meta["attn"], **{k: meta[k] for k in cls.KEYS}, **text)

    def flops_per_clip(self):
        """Training FLOPs of one clip (3 x forward, 2 FLOPs a multiply-add): every matmul plus
        attention's products. In multiply-adds, per token: the patch embedding and the final
        linear (2 P C), each block's qkv, proj and MLP (12 C^2) and its attention (2 C per key
        seen: q k^T and att v); per clip: the timestep MLP (FREQ C + C^2), each block's adaLN
        (6 C^2) and the final one's (2 C^2). With text (Lt > 0), per token and block the cross
        q_linear and proj (2 C^2) and products over all Lt keys (2 Lt C; a caption's length n
        does not shorten it); per clip, each block's k_linear and v_linear over the Lt text
        positions (2 Lt C^2) and the text MLP once (Lt (Din C + C^2)), every clip counted so
        even when its text is the null one. Embedding lookups are not counted."""
        S, C, P, L, Lt = self.tokens, self.n_embd, self.patch_dim, self.n_layer, self.text_len
        per_token = P * C + L * 12 * C * C + C * P
        per_clip = FREQ_DIM * C + C * C + L * 6 * C * C + 2 * C * C
        attn = 0
        for l in range(L):
            seen = S if self.attn == "full" else (
                self.grid[1] * self.grid[2] if l % 2 == 0 else self.grid[0])
            attn += 2 * seen * C
        if Lt > 0:
            per_token += L * (2 * C * C + 2 * Lt * C)
            per_clip += L * 2 * Lt * C * C + Lt * (self.text_in * C + C * C)
        return 6.0 * (S * (per_token + attn) + per_clip)


# ----------------------------------------------------------------------------- the model

_ONEDNN = False


def use_onednn(on=True):
    """The linears' matmuls through torch's bundled oneDNN (fp32; what bench/torch_step.py
    does for Debian's torch, whose default BLAS may be the slow reference one) or back to
    native torch.matmul / F.linear."""
    global _ONEDNN
    _ONEDNN = on
    R.use_onednn(on)


def lin(m, x):
    if not _ONEDNN:
        return m(x)
    y = R.linear(x, m.weight)
    return y if m.bias is None else y + m.bias


def modulate(x, shift, scale):
    """x [B, S, C], shift/scale [B, C]"""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_features(t, dtype):
    half = FREQ_DIM // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half)
    arg = 1000.0 * t.double()[:, None] * freqs[None]
    return torch.cat([torch.cos(arg), torch.sin(arg)], dim=-1).to(dtype)


def positions_3d(grid, C, dtype):
    """[Tt Th Tw, C] fixed sinusoidal code of (frame, row, column)"""
    k = C // 6
    w = 10000.0 ** (-torch.arange(k, dtype=torch.float64) / k)
    axes = torch.meshgrid(*[torch.arange(n, dtype=torch.float64) for n in grid], indexing="ij")
    parts = []
    for p in axes:
        a = p.reshape(-1, 1) * w[None]
        parts += [torch.sin(a), torch.cos(a)]
    pos = torch.cat(parts, dim=1)
    pos = F.pad(pos, (0, C - 6 * k))
    return pos.to(dtype)


class Attention(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x):
        """x [B', T', C]: softmax(q k^T / sqrt(hs)) v per head, every token sees every token."""
        Bp, T, C = x.shape
        qkv = lin(self.qkv, x).reshape(Bp, T, 3, self.n_head, C // self.n_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [B', NH, T', hs] each
        # torch.matmul on either route: the oneDNN route's batched product is a Python loop
        att = torch.matmul(q, k.transpose(-2, -1)) * (q.size(-1) ** -0.5)
        y = torch.matmul(att.softmax(dim=-1), v)
        return lin(self.proj, y.transpose(1, 2).reshape(Bp, T, C))


class CrossAttention(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.q_linear = nn.Linear(C, C)
        self.k_linear = nn.Linear(C, C, bias=False)  # a key bias shifts a softmax: nothing
        self.v_linear = nn.Linear(C, C)
        self.proj = nn.Linear(C, C)

    def heads(self, z):
        """[B, T, C] -> [B, NH, T, hs]: head h is columns h hs .. (h + 1) hs - 1"""
        B, T, C = z.shape
        return z.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def forward(self, x, y, keep):
        """x [B, S, C], the clip's every token, queries its text y [B, Lt, C]; keep [B, Lt]
        (bool): the keys attended. A masked key gets -inf, so exactly 0 weight and gradient."""
        B, S, C = x.shape
        q = self.heads(lin(self.q_linear, x))
        k, v = self.heads(lin(self.k_linear, y)), self.heads(lin(self.v_linear, y))
        att = torch.matmul(q, k.transpose(-2, -1)) * (q.size(-1) ** -0.5)
        att = att.masked_fill(~keep[:, None, None, :], float("-inf"))
        o = torch.matmul(att.softmax(dim=-1), v)
        return lin(self.proj, o.transpose(1, 2).reshape(B, S, C))


class Mlp(nn.Module):
    def __init__(self, C, hidden, out=None):
        """C -> hidden -> out (C when None): the block's MLP, or the text projection
        (Din -> C -> C)"""
        super().__init__()
        self.fc1 = nn.Linear(C, hidden)
        self.fc2 = nn.Linear(hidden, C if out is None else out)

    def forward(self, x):
        return lin(self.fc2, F.gelu(lin(self.fc1, x), approximate="tanh"))


class Block(nn.Module):
    """kind: full | spatial | temporal"""

    def __init__(self, cfg, kind):
        super().__init__()
        C = cfg.n_embd
        self.kind, self.grid = kind, cfg.grid
        self.norm1 = nn.LayerNorm(C, elementwise_affine=False, eps=NORM_EPS)
        self.attn = Attention(C, cfg.n_head)
        if cfg.text_len > 0:
            self.cross_attn = CrossAttention(C, cfg.n_head)
        self.norm2 = nn.LayerNorm(C, elementwise_affine=False, eps=NORM_EPS)
        self.mlp = Mlp(C, 4 * C)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(C, 6 * C))

    def attend(self, h):
        B, S, C = h.shape
        Tt, Th, Tw = self.grid
        if self.kind == "full":
            return self.attn(h)
        h = h.reshape(B, Tt, Th * Tw, C)
        if self.kind == "spatial":  # one sequence per frame
            return self.attn(h.reshape(B * Tt, Th * Tw, C)).reshape(B, S, C)
        # temporal: one sequence per spatial position, across the frames
        y = self.attn(h.transpose(1, 2).reshape(B * Th * Tw, Tt, C))
        return y.reshape(B, Th * Tw, Tt, C).transpose(1, 2).reshape(B, S, C)

    def forward(self, x, c, text=None):
        """text: (y [B, Lt, C], keep [B, Lt]) of a model with text, else None"""
        mod = lin(self.adaLN_modulation[1], self.adaLN_modulation[0](c))
        shift1, scale1, gate1, shift2, scale2, gate2 = mod.chunk(6, dim=1)
        x = x + gate1.unsqueeze(1) * self.attend(modulate(self.norm1(x), shift1, scale1))
        if text is not None:  # ungated, unnormed (PixArt-alpha)
            x = x + self.cross_attn(x, *text)
        return x + gate2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift2, scale2))


class PatchEmbed3D(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        patch = (cfg.patch_t, cfg.patch_h, cfg.patch_w)
        self.proj = nn.Conv3d(cfg.channels, cfg.n_embd, kernel_size=patch, stride=patch)

    def forward(self, clip):
        """clip [B, frames, ch, H, W] -> tokens [B, S, C], ordered (frame, row, column)"""
        x = clip.transpose(1, 2)  # Conv3d wants [B, ch, T, H, W]
        if _ONEDNN:  # the same product as a patchified matmul (Conv3d has no route switch)
            B, ch, T, H, W = x.shape
            pt, ph, pw = self.proj.kernel_size
            p = x.reshape(B, ch, T // pt, pt, H // ph, ph, W // pw, pw)
            p = p.permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(B, -1, ch * pt * ph * pw)
            return R.linear(p, self.proj.weight.reshape(self.proj.out_channels, -1)) \
                + self.proj.bias
        return self.proj(x).flatten(2).transpose(1, 2)


class TimestepEmbedder(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FREQ_DIM, C), nn.SiLU(), nn.Linear(C, C))

    def forward(self, t, dtype):
        f = timestep_features(t, dtype)
        return lin(self.mlp[2], self.mlp[1](lin(self.mlp[0], f)))


class LabelEmbedder(nn.Module):
    def __init__(self, n_classes, C):
        super().__init__()
        if n_classes > 0:  # (0: a TextEmbedder of a model without labels)
            self.embedding_table = nn.Embedding(n_classes + 1, C)  # row n_classes: no label

    def forward(self, labels):
        return self.embedding_table(labels)


class TextEmbedder(LabelEmbedder):
    """The y_embedder of a model with text. dtrain names the label table and the text's
    tensors alike y_embedder.*, so this one module holds both (the label table only when
    n_classes > 0; forward(labels) is still the label embedding, text(...) the text's)."""

    def __init__(self, cfg):
        super().__init__(cfg.n_classes, cfg.n_embd)
        C, self.text_len, self.text_dim = cfg.n_embd, cfg.text_len, cfg.text_dim
        self.y_proj = Mlp(cfg.text_in, C, C)
        if self.text_dim == 0:
            self.byte_embedding = nn.Embedding(256, C)
            self.pos_embedding = nn.Embedding(self.text_len, C)
        self.y_embedding = nn.Parameter(torch.zeros(self.text_len, C))  # the null text

    def features(self, body, n):
        """f [B, Lt, Din] from the rows' values after n: the given embeddings, or for bytes
        concat(e_{i-1}, e_i, e_{i+1}), e_j = byte + position embedding for j < n, else 0"""
        B, Lt = body.shape[0], self.text_len
        if self.text_dim > 0:
            return body.reshape(B, Lt, self.text_dim)
        e = self.byte_embedding(body.round().long()) + self.pos_embedding.weight
        e = e * (torch.arange(Lt) < n[:, None]).unsqueeze(-1).to(e.dtype)
        z = F.pad(e, (0, 0, 1, 1))  # zero vectors at positions -1 and Lt
        return torch.cat([z[:, :-2], z[:, 1:-1], z[:, 2:]], dim=-1)

    def text(self, text):
        """text [B, 1 + Lt max(text_dim, 1)] -> (y [B, Lt, C], keep [B, Lt] the keys attended):
        the projected features and their first n keys, or (n <= 0) the null text, all keys"""
        n = text[:, 0].round().long()
        y = self.y_proj(self.features(text[:, 1:], n))
        null = n <= 0
        y = torch.where(null[:, None, None], self.y_embedding.to(y.dtype), y)
        keep = (torch.arange(self.text_len)[None] < n[:, None]) | null[:, None]
        return y, keep


def null_text(cfg, B, dtype):
    """[B, cfg.text_row] rows of no text (n = -1): every clip gets the null sequence"""
    text = torch.zeros(B, cfg.text_row, dtype=dtype)
    text[:, 0] = -1
    return text


class FinalLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.norm_final = nn.LayerNorm(C, elementwise_affine=False, eps=NORM_EPS)
        self.linear = nn.Linear(C, cfg.patch_dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(C, 2 * C))

    def forward(self, x, c):
        shift, scale = lin(self.adaLN_modulation[1], self.adaLN_modulation[0](c)).chunk(2, dim=1)
        return lin(self.linear, modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.x_embedder = PatchEmbed3D(cfg)
        self.t_embedder = TimestepEmbedder(cfg.n_embd)
        if cfg.text_len > 0:  # holds the label table too (n_classes > 0)
            self.y_embedder = TextEmbedder(cfg)
        elif cfg.n_classes > 0:
            self.y_embedder = LabelEmbedder(cfg.n_classes, cfg.n_embd)
        kinds = ["full"] * cfg.n_layer if cfg.attn == "full" else \
            ["spatial" if l % 2 == 0 else "temporal" for l in range(cfg.n_layer)]
        self.blocks = nn.ModuleList(Block(cfg, k) for k in kinds)
        self.final_layer = FinalLayer(cfg)
        self.register_buffer("pos", positions_3d(cfg.grid, cfg.n_embd, torch.float64),
                             persistent=False)

    def unpatchify(self, tok):
        """tokens [B, S, ch pt ph pw] -> clip [B, frames, ch, H, W]"""
        c = self.cfg
        (Tt, Th, Tw), (pt, ph, pw) = c.grid, (c.patch_t, c.patch_h, c.patch_w)
        B = tok.shape[0]
        x = tok.reshape(B, Tt, Th, Tw, c.channels, pt, ph, pw)
        x = x.permute(0, 1, 5, 4, 2, 6, 3, 7)  # B, Tt, pt, ch, Th, ph, Tw, pw
        return x.reshape(B, c.frames, c.channels, c.height, c.width)

    def forward(self, clip, t, labels=None, text=None):
        """text [B, 1 + Lt max(text_dim, 1)] (a model with text; None: no text for any clip)"""
        dtype, B = clip.dtype, clip.shape[0]
        x = self.x_embedder(clip) + self.pos.to(dtype)
        c = self.t_embedder(t, dtype)
        if self.cfg.n_classes > 0:
            if labels is None:
                labels = torch.full((B,), self.cfg.n_classes, dtype=torch.long)
            c = c + self.y_embedder(labels)
        y = None
        if self.cfg.text_len > 0:
            y = self.y_embedder.text(null_text(self.cfg, B, dtype) if text is None
                                     else text.to(dtype))
        for blk in self.blocks:
            x = blk(x, c, y)
        return self.unpatchify(self.final_layer(x, c))


def state_dict_from_dtrain(tensors, model, prefix="w."):
    """{name: tensor} for model.load_state_dict from dtrain's PREFIX.NAME arrays."""
    want = model.state_dict()
    out = {}
    for name, ref in want.items():
        key = prefix + name
        if key not in tensors:
            raise InputError(f"dump lacks {key}")
        a = torch.from_numpy(np.asarray(tensors[key]))
        if name == "x_embedder.proj.weight":
            a = a.reshape(ref.shape)  # dtrain: Conv3d weight flattened to [C, ch pt ph pw]
        if tuple(a.shape) != tuple(ref.shape):
            raise InputError(f"{key} has shape {list(a.shape)}, want {list(ref.shape)}")
        out[name] = a.to(ref.dtype)
    extra = sorted(k[len(prefix):] for k in tensors if k.startswith(prefix)
                   and k[len(prefix):] not in want)
    if extra:
        raise InputError(f"dump has parameters the torch DiT lacks: {', '.join(extra[:3])}")
    return out


def to_dtrain_layout(name, a):
    return a.reshape(a.shape[0], -1) if name == "x_embedder.proj.weight" else a


def make_adamw(model, lr, betas, eps, weight_decay):
    """torch.optim.AdamW, weight decay on matrices (>= 2-D: linears, Conv3d, label table, the
    text's byte and position tables and null text y_embedding), none on biases: dtrain's rule
    (src/core/param.c: a tensor decays when it is 2-D, and every tensor it keeps is 1-D or 2-D,
    the Conv3d weight flattened)."""
    ps = list(model.parameters())
    groups = [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=False)


def flow_loss(model, x0, eps, t, labels, text=None):
    """rectified flow: x_t = (1 - t) x0 + t eps, target v = eps - x0, mean squared error"""
    tb = t.reshape(-1, *([1] * (x0.dim() - 1)))
    xt = (1 - tb) * x0 + tb * eps
    out = model(xt, t, labels, text)
    return out, F.mse_loss(out, eps - x0)


# ----------------------------------------------------------------------------- the check

def text_desc(cfg, text):
    """'text 8x0 n [8, 4, -1]' (Lt x text_dim, 0: bytes) or 'no text', for the header line"""
    if text is None:
        return "no text"
    return f"text {cfg.text_len}x{cfg.text_dim} n {[int(v) for v in text[:, 0]]}"


def rel_err(got, want):
    """||got - want|| / ||want||"""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def load_text(tensors, cfg, B):
    """The dump's text [B, 1 + Lt max(text_dim, 1)] as float64 (None for a model without
    text), refused unless each row's n is a whole number in -1..Lt and, for bytes, every
    value a byte id: dtrain and this model would read anything else differently."""
    if cfg.text_len == 0:
        return None
    if "text" not in tensors:
        raise InputError("the dump's metadata has text_len > 0 but no tensor text")
    text = torch.from_numpy(tensors["text"]).double()
    if tuple(text.shape) != (B, cfg.text_row):
        raise InputError(f"text has shape {list(text.shape)}, want [{B}, {cfg.text_row}]")
    n = text[:, 0]
    if not torch.equal(n, n.round()) or n.min() < -1 or n.max() > cfg.text_len:
        raise InputError(f"text lengths {n.tolist()} are not whole numbers in -1..{cfg.text_len}")
    ids = text[:, 1:]
    if cfg.text_dim == 0 and (not torch.equal(ids, ids.round()) or ids.min() < 0
                              or ids.max() > 255):
        raise InputError("text byte ids are not whole numbers in 0..255")
    return text


def check(a):
    try:
        tensors, meta = st.read_safetensors(a.dump)
    except st.FormatError as e:
        raise InputError(str(e))
    cfg = DiTConfig.from_metadata(meta)
    for k in ("x0", "eps", "t", "labels", "out"):
        if k not in tensors:
            raise InputError(f"{a.dump}: lacks tensor {k}")
    if a.perturb:
        if a.perturb not in tensors:
            raise InputError(f"--perturb {a.perturb}: no such tensor in the dump")
        tensors[a.perturb] = tensors[a.perturb] * 1.001
    dtype = torch.float64 if a.fp64 else torch.float32
    model = DiT(cfg).to(dtype)
    model.load_state_dict(state_dict_from_dtrain(tensors, model))
    opt = make_adamw(model, float(meta["lr"]), (float(meta["beta1"]), float(meta["beta2"])),
                     float(meta["eps"]), float(meta["weight_decay"]))
    x0, eps = (torch.from_numpy(tensors[k]).to(dtype) for k in ("x0", "eps"))
    t = torch.from_numpy(tensors["t"]).to(dtype)
    labels = torch.from_numpy(tensors["labels"]).long() if cfg.n_classes else None
    text = load_text(tensors, cfg, x0.shape[0])
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    out, loss = flow_loss(model, x0, eps, t, labels, text)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()

    print(f"torch_dit: {cfg.attn} L{cfg.n_layer} H{cfg.n_head} C{cfg.n_embd} clip "
          f"{cfg.frames}x{cfg.channels}x{cfg.height}x{cfg.width} patch {cfg.patch_t}x"
          f"{cfg.patch_h}x{cfg.patch_w} classes {cfg.n_classes} {text_desc(cfg, text)} "
          f"B{x0.shape[0]} "
          f"({'fp64' if a.fp64 else 'fp32'}, {a.matmul} matmul, torch {torch.__version__}); "
          f"||dtrain - torch||_2 / ||torch||_2 per tensor <= {a.rtol:g}")
    rows = [("output", rel_err(tensors["out"], out.detach().numpy())),
            ("loss", rel_err(float(meta["loss"]), loss.item()))]
    if "flops_per_clip" in meta:  # the count bench/torch_dit_step.py's MFU rests on
        rows.append(("FLOPs per clip", rel_err(float(meta["flops_per_clip"]),
                                               cfg.flops_per_clip())))
    params = dict(model.named_parameters())
    tg = {n: to_dtrain_layout(n, grads[n]).numpy() for n in params}
    tw = {n: to_dtrain_layout(n, p.detach()).numpy() for n, p in params.items()}
    tu = {n: to_dtrain_layout(n, p.detach() - w0[n]).numpy() for n, p in params.items()}
    for n in params:
        rows.append(("grad " + n, rel_err(tensors["g." + n], tg[n])))
        rows.append(("weight " + n, rel_err(tensors["u." + n], tw[n])))
        rows.append(("update " + n, rel_err(tensors["u." + n] - tensors["w." + n], tu[n])))
    failed = 0
    for what, err in rows:
        ok = err <= a.rtol
        failed += not ok
        if not ok or a.verbose:
            print(f"  {'ok  ' if ok else 'FAIL'}  {what:52s} {err:9.2e}")
    worst = max(rows, key=lambda r: r[1])
    print(f"loss dtrain {float(meta['loss']):.9g} torch {loss.item():.9g}; worst: {worst[0]} "
          f"{worst[1]:.2e}; {len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dump", required=True)
    p.add_argument("--fp64", action="store_true")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--perturb", default="")
    p.add_argument("--verbose", action="store_true", help="print every row, not only failures")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--matmul", choices=("native", "onednn"), default="native",
                   help="the linears' route (onednn: the benchmark's, fp32 only)")
    a = p.parse_args(argv)
    if a.matmul == "onednn" and a.fp64:
        p.error("--matmul onednn is fp32 only")
    torch.set_num_threads(a.threads)
    use_onednn(a.matmul == "onednn")
    try:
        return check(a)
    except InputError as e:
        print(f"torch_dit: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
