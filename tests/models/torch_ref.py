#!/usr/bin/python3
"""Independent PyTorch reference for dtrain's whole-model training (DESIGN invariant 2).

Recomputes a dtrain run in PyTorch from the same initial weights and token shard, then
compares dtrain's per-step metrics and final weights with the reference:

  torch_ref.py --init INIT.safetensors --data TRAIN.bin --metrics METRICS.jsonl \
      --final FINAL.safetensors --batch B --micro-batch MB --seq-len T --steps S \
      --lr LR --min-lr MINLR --warmup W --schedule cosine|constant --beta1 B1 --beta2 B2 \
      --eps EPS --weight-decay WD --grad-clip GC [--rtol 1e-4] [--threads 1] [--fp64]
  torch_ref.py --selftest          # checks this script against itself (no dtrain needed)

Exit 0 when every check passes, 1 on any mismatch, 2 on missing or invalid inputs.
Models (GPT-2 and Llama, HuggingFace tensor names and layouts) are plain functions over a
dict of tensors; bench/torch_step.py imports them from here.
Run with /usr/bin/python3 (Debian python3-torch 1.13 + numpy).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


class InputError(Exception):
    """Missing or invalid input: exit status 2."""


# ----------------------------------------------------------------------------- config

class Config:
    """Model hyper-parameters, as found in a safetensors __metadata__ string map."""

    def __init__(self, arch, n_layer, n_head, n_embd, vocab_size, max_seq_len,
                 n_kv_head=None, ffn_hidden=None, rope_theta=10000.0, norm_eps=1e-5):
        if arch not in ("gpt2", "llama"):
            raise InputError(f"unknown arch '{arch}' (want gpt2 or llama)")
        self.arch, self.n_layer, self.n_head, self.n_embd = arch, n_layer, n_head, n_embd
        self.vocab_size, self.max_seq_len = vocab_size, max_seq_len
        self.n_kv_head = n_kv_head or n_head
        self.ffn_hidden = ffn_hidden or 4 * n_embd
        self.rope_theta, self.norm_eps = rope_theta, norm_eps
        if n_embd % n_head or n_head % self.n_kv_head:
            raise InputError(f"n_embd={n_embd}, n_head={n_head}, n_kv_head={self.n_kv_head} "
                             "do not divide")

    @property
    def head_size(self):
        return self.n_embd // self.n_head

    @classmethod
    def from_metadata(cls, meta):
        def get(key, conv, default=None):
            if key not in meta or meta[key] in ("", None):
                if default is None:
                    raise InputError(f"init __metadata__ lacks '{key}'")
                return default
            try:
                return conv(meta[key])
            except ValueError:
                raise InputError(f"init __metadata__ '{key}'='{meta[key]}' is not a {conv.__name__}")
        return cls(get("arch", str), get("n_layer", int), get("n_head", int),
                   get("n_embd", int), get("vocab_size", int), get("max_seq_len", int),
                   n_kv_head=get("n_kv_head", int, 0), ffn_hidden=get("ffn_hidden", int, 0),
                   rope_theta=get("rope_theta", float, 10000.0),
                   norm_eps=get("norm_eps", float, 1e-5))

    def metadata(self):
        keys = ("arch", "n_layer", "n_head", "n_kv_head", "n_embd", "vocab_size",
                "max_seq_len", "ffn_hidden", "rope_theta", "norm_eps")
        return {k: str(getattr(self, k)) for k in keys}


def param_shapes(cfg):
    """Ordered {name: shape} of every trainable tensor (HF names and layouts)."""
    C, V, L, F_ = cfg.n_embd, cfg.vocab_size, cfg.n_layer, cfg.ffn_hidden
    if cfg.arch == "gpt2":
        shapes = {"wte.weight": (V, C), "wpe.weight": (cfg.max_seq_len, C)}
        for i in range(L):
            p = f"h.{i}."
            shapes.update({
                p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                p + "mlp.c_fc.weight": (C, F_), p + "mlp.c_fc.bias": (F_,),
                p + "mlp.c_proj.weight": (F_, C), p + "mlp.c_proj.bias": (C,)})
        shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
        return shapes
    hs, NH, NKV = cfg.head_size, cfg.n_head, cfg.n_kv_head
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (NH * hs, C),
            p + "self_attn.k_proj.weight": (NKV * hs, C),
            p + "self_attn.v_proj.weight": (NKV * hs, C),
            p + "self_attn.o_proj.weight": (C, NH * hs),
            p + "post_attention_layernorm.weight": (C,),
            p + "mlp.gate_proj.weight": (F_, C), p + "mlp.up_proj.weight": (F_, C),
            p + "mlp.down_proj.weight": (C, F_)})
    shapes.update({"model.norm.weight": (C,), "lm_head.weight": (V, C)})
    return shapes


def random_init(cfg, seed):
    """GPT-2-style random weights (numpy float32): N(0, 0.02) matrices, norm gains near 1,
    small nonzero biases so that every gradient path is exercised."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) >= 2:
            out[name] = rng.normal(0.0, 0.02, shape)
        elif name.endswith(".bias"):
            out[name] = rng.normal(0.0, 0.01, shape)
        else:
            out[name] = 1.0 + rng.normal(0.0, 0.05, shape)
        out[name] = out[name].astype(np.float32)
    return out


# ----------------------------------------------------------------------------- models

class _OneDNNABt(torch.autograd.Function):
    """a @ b^T through torch's bundled oneDNN (mkldnn_linear), for 2-D or batched 3-D inputs.
    Debian's torch links the reference BLAS, so its native fp32 matmul runs at a few GFLOP/s;
    bench/torch_step.py switches to this (use_onednn) to give PyTorch its best."""

    @staticmethod
    def raw(a, b):
        if a.dim() == 2:
            return torch._C._nn.mkldnn_linear(a.contiguous().to_mkldnn(),
                                              b.contiguous().to_mkldnn()).to_dense()
        return torch.stack([_OneDNNABt.raw(a[i], b[i]) for i in range(a.size(0))])

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _OneDNNABt.raw(a, b)

    @staticmethod
    def backward(ctx, gy):
        a, b = ctx.saved_tensors
        return (_OneDNNABt.raw(gy, b.transpose(-2, -1)),
                _OneDNNABt.raw(gy.transpose(-2, -1), a.transpose(-2, -1)))


def _abt_native(a, b):
    return torch.matmul(a, b.transpose(-2, -1))


def _abt_onednn(a, b):
    """Flattens leading dims: [.., M, K] x [.., N, K] -> [.., M, N]; a 2-D b is shared."""
    if b.dim() == 2:
        y = _OneDNNABt.apply(a.reshape(-1, a.size(-1)), b)
        return y.view(*a.shape[:-1], b.size(0))
    y = _OneDNNABt.apply(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return y.view(*a.shape[:-1], b.size(-2))


_ABT = _abt_native


def use_onednn(on=True):
    """Route every matmul of the models through oneDNN (fp32 only) or back to torch.matmul."""
    global _ABT
    _ABT = _abt_onednn if on else _abt_native


def abt(a, b):
    """a @ b^T over the last two dims (b may be a 2-D weight)."""
    return _ABT(a, b)


def linear(x, w):
    """nn.Linear layout: y = x @ W^T with W [out, in]."""
    return abt(x, w)


def causal_mask(T, device=None):
    """True above the diagonal: positions a query must not see."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)


def attention(q, k, v, mask):
    """softmax(q k^T / sqrt(hs), causal) v for [B, H, T, hs] tensors."""
    att = abt(q, k) * (1.0 / math.sqrt(q.size(-1)))
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    return abt(att, v.transpose(-2, -1))


def split_heads(x, n):
    B, T, _ = x.shape
    return x.view(B, T, n, -1).transpose(1, 2)


def merge_heads(y):
    B, H, T, hs = y.shape
    return y.transpose(1, 2).reshape(B, T, H * hs)


def conv1d(x, w, b):
    """HF Conv1D: y = x @ W + b with W stored [in, out]."""
    return abt(x, w.t()) + b


def gpt2_block(P, p, cfg, x, mask):
    C, eps = cfg.n_embd, cfg.norm_eps
    h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
    q, k, v = conv1d(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]).split(C, dim=-1)
    y = attention(split_heads(q, cfg.n_head), split_heads(k, cfg.n_head),
                  split_heads(v, cfg.n_head), mask)
    x = x + conv1d(merge_heads(y), P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
    h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
    h = F.gelu(conv1d(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]), approximate="tanh")
    return x + conv1d(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])


def gpt2_forward(P, cfg, idx):
    """GPT2LMHeadModel logits [B, T, V]; lm_head is wte (tied)."""
    T = idx.size(1)
    mask = causal_mask(T, idx.device)
    x = F.embedding(idx, P["wte.weight"]) + P["wpe.weight"][:T]
    for i in range(cfg.n_layer):
        x = gpt2_block(P, f"h.{i}.", cfg, x, mask)
    x = F.layer_norm(x, (cfg.n_embd,), P["ln_f.weight"], P["ln_f.bias"], cfg.norm_eps)
    return linear(x, P["wte.weight"])


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(cfg, T, dtype):
    """HF cos/sin [T, hs]: inv_freq = theta^(-arange(0,hs,2)/hs), cat(freqs, freqs)."""
    hs = cfg.head_size
    inv_freq = cfg.rope_theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def llama_block(P, p, cfg, x, mask, cos, sin):
    rep = cfg.n_head // cfg.n_kv_head
    h = rms_norm(x, P[p + "input_layernorm.weight"], cfg.norm_eps)
    q = apply_rope(split_heads(linear(h, P[p + "self_attn.q_proj.weight"]), cfg.n_head), cos, sin)
    k = apply_rope(split_heads(linear(h, P[p + "self_attn.k_proj.weight"]), cfg.n_kv_head), cos, sin)
    v = split_heads(linear(h, P[p + "self_attn.v_proj.weight"]), cfg.n_kv_head)
    if rep > 1:  # query head h reads kv head h // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    x = x + linear(merge_heads(attention(q, k, v, mask)), P[p + "self_attn.o_proj.weight"])
    h = rms_norm(x, P[p + "post_attention_layernorm.weight"], cfg.norm_eps)
    g = F.silu(linear(h, P[p + "mlp.gate_proj.weight"])) * linear(h, P[p + "mlp.up_proj.weight"])
    return x + linear(g, P[p + "mlp.down_proj.weight"])


def llama_forward(P, cfg, idx):
    """LlamaForCausalLM logits [B, T, V]; lm_head untied."""
    T = idx.size(1)
    mask = causal_mask(T, idx.device)
    x = F.embedding(idx, P["model.embed_tokens.weight"])
    cos, sin = rope_tables(cfg, T, x.dtype)
    for i in range(cfg.n_layer):
        x = llama_block(P, f"model.layers.{i}.", cfg, x, mask, cos, sin)
    x = rms_norm(x, P["model.norm.weight"], cfg.norm_eps)
    return linear(x, P["lm_head.weight"])


def forward(P, cfg, idx):
    return gpt2_forward(P, cfg, idx) if cfg.arch == "gpt2" else llama_forward(P, cfg, idx)


def make_params(arrays, cfg, dtype=torch.float32):
    """{name: Parameter} from numpy arrays, checking names and shapes against cfg."""
    want = param_shapes(cfg)
    missing = [n for n in want if n not in arrays]
    if missing:
        raise InputError(f"init lacks {len(missing)} tensors, first: {missing[0]}")
    P = {}
    for name, shape in want.items():
        if tuple(arrays[name].shape) != tuple(shape):
            raise InputError(f"init tensor {name} has shape {list(arrays[name].shape)}, "
                             f"want {list(shape)}")
        P[name] = torch.nn.Parameter(torch.tensor(arrays[name], dtype=dtype))
    return P


def make_adamw(P, lr, betas, eps, weight_decay, **kw):
    """AdamW with decay on ndim >= 2 tensors and none on 1-D ones."""
    decay = [p for p in P.values() if p.ndim >= 2]
    no_decay = [p for p in P.values() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kw)


# ----------------------------------------------------------------------------- training

def lr_at(s, a):
    """Learning rate for 0-based step s."""
    if s < a.warmup:
        return a.lr * (s + 1) / a.warmup
    if a.schedule == "constant":
        return a.lr
    progress = (s - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1.0 + math.cos(math.pi * progress))


def batches(tokens, B, T, steps):
    """Yield (inputs, targets) [B, T] exactly as llm.c's sequential loader."""
    n, pos = len(tokens), 0
    for _ in range(steps):
        chunk = torch.from_numpy(tokens[pos:pos + B * T + 1])
        yield chunk[:-1].view(B, T), chunk[1:].view(B, T)
        pos += B * T
        if pos + B * T + 1 > n:
            pos = 0


def grad_step(P, cfg, x, y, n_micro):
    """Forward/backward over micro-batches; returns the mean loss over all tokens."""
    total = 0.0
    for xs, ys in zip(x.chunk(n_micro), y.chunk(n_micro)):
        logits = forward(P, cfg, xs)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ys.reshape(-1))
        (loss / n_micro).backward()
        total += loss.item()
    return total / n_micro


def global_grad_norm(P, clip):
    params = list(P.values())
    if clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    return float(torch.norm(torch.stack([p.grad.detach().norm() for p in params])))


def train(P, cfg, tokens, a):
    """Run a.steps AdamW steps in place on P; return [{step, loss, lr, grad_norm}]."""
    opt = make_adamw(P, a.lr, (a.beta1, a.beta2), a.eps, a.weight_decay)
    records = []
    for s, (x, y) in enumerate(batches(tokens, a.batch, a.seq_len, a.steps)):
        lr = lr_at(s, a)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = grad_step(P, cfg, x, y, a.batch // a.micro_batch)
        norm = global_grad_norm(P, a.grad_clip)
        opt.step()
        records.append({"step": s + 1, "loss": loss, "lr": lr, "grad_norm": norm})
    return records


# ----------------------------------------------------------------------------- inputs

def load_metrics(path):
    """{step: record} from a JSON-lines file (records lacking step/loss are skipped)."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    out = {}
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{no}: not JSON: {e}")
        if isinstance(rec, dict) and "step" in rec and "loss" in rec:
            out[int(rec["step"])] = rec
    if not out:
        raise InputError(f"{path}: no records with 'step' and 'loss'")
    return out


def validate_args(a, cfg, n_tokens):
    if a.batch <= 0 or a.micro_batch <= 0 or a.batch % a.micro_batch:
        raise InputError(f"--micro-batch {a.micro_batch} must divide --batch {a.batch}")
    if not 0 < a.seq_len <= cfg.max_seq_len:
        raise InputError(f"--seq-len {a.seq_len} outside 1..max_seq_len={cfg.max_seq_len}")
    if a.steps <= 0 or a.warmup < 0:
        raise InputError("--steps must be positive and --warmup non-negative")
    if a.batch * a.seq_len + 1 > n_tokens:
        raise InputError(f"data holds {n_tokens} tokens, one batch needs {a.batch * a.seq_len + 1}")


def load_inputs(a):
    """Return (cfg, init arrays, tokens) or raise InputError."""
    try:
        init, meta = st.read_safetensors(a.init)
        tokens = st.read_tokens(a.data)
    except st.FormatError as e:
        raise InputError(str(e))
    cfg = Config.from_metadata(meta)
    validate_args(a, cfg, len(tokens))
    if tokens.size and tokens.max() >= cfg.vocab_size:
        raise InputError(f"{a.data}: token {tokens.max()} >= vocab_size {cfg.vocab_size}")
    return cfg, init, tokens


# ----------------------------------------------------------------------------- comparison

class Report:
    """Collects pass/fail rows and prints them as tables."""

    def __init__(self):
        self.passed, self.failed = 0, 0

    def row(self, ok, text):
        self.passed += ok
        self.failed += not ok
        print(f"  {'ok  ' if ok else 'FAIL'}  {text}")


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def compare_metrics(rep, metrics, ref, a):
    print(f"per-step metrics (loss rtol {a.rtol:g}, lr rtol 1e-6, grad_norm rtol 1e-3):")
    print(f"        {'step':>5} {'loss dtrain':>14} {'loss torch':>14} {'rel err':>9}  notes")
    for r in ref:
        m = metrics.get(r["step"])
        if m is None:
            rep.row(False, f"{r['step']:5d} missing from metrics")
            continue
        err = rel(float(m["loss"]), r["loss"])
        notes, ok = [], err <= a.rtol
        if "lr" in m:
            lr_err = rel(float(m["lr"]), r["lr"])
            ok &= lr_err <= 1e-6
            notes.append(f"lr {float(m['lr']):.6g}" + ("" if lr_err <= 1e-6 else f" != {r['lr']:.6g}"))
        if m.get("grad_norm") is not None:
            gn_err = rel(float(m["grad_norm"]), r["grad_norm"])
            ok &= gn_err <= 1e-3
            notes.append(f"grad_norm {float(m['grad_norm']):.6g} vs {r['grad_norm']:.6g}"
                         f" (rel {gn_err:.1e})")
        rep.row(ok, f"{r['step']:5d} {float(m['loss']):14.8f} {r['loss']:14.8f} {err:9.2e}  "
                + ", ".join(notes))
    extra = sorted(s for s in metrics if s > len(ref) or s < 1)
    if extra:
        rep.row(False, f"metrics has steps outside 1..{len(ref)}: {extra[:5]}")


def tensor_rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def compare_final(rep, final, P, cfg, rtol):
    print(f"final tensors (||dtrain - torch|| / ||torch|| <= {rtol:g}):")
    ref = {n: p.detach().double().numpy() for n, p in P.items()}
    if cfg.arch == "gpt2" and "lm_head.weight" in final:
        ref["lm_head.weight"] = ref["wte.weight"]  # tied; allowed when written out
    worst = (-1.0, None)
    for name in ref:
        if name not in final:
            if name != "lm_head.weight" or cfg.arch != "gpt2":
                rep.row(False, f"{name}: missing from final")
            continue
        if tuple(final[name].shape) != tuple(ref[name].shape):
            rep.row(False, f"{name}: shape {list(final[name].shape)} != {list(ref[name].shape)}")
            continue
        err = tensor_rel_err(final[name], ref[name])
        worst = max(worst, (err, name))
        rep.row(err <= rtol, f"{name:48s} {str(list(ref[name].shape)):>14s} {err:9.2e}")
    for name in sorted(set(final) - set(ref)):
        rep.row(False, f"{name}: not a parameter of this {cfg.arch} model")
    if worst[1] is not None:
        print(f"worst tensor: {worst[1]} rel err {worst[0]:.2e}")


def check(a):
    """Load, recompute, compare. Returns the exit status."""
    torch.set_num_threads(a.threads)
    cfg, init, tokens = load_inputs(a)
    metrics = load_metrics(a.metrics)
    try:
        final, _ = st.read_safetensors(a.final)
    except st.FormatError as e:
        raise InputError(str(e))
    dtype = torch.float64 if a.fp64 else torch.float32
    P = make_params(init, cfg, dtype)
    print(f"torch_ref: {cfg.arch} L{cfg.n_layer} H{cfg.n_head}/{cfg.n_kv_head} C{cfg.n_embd} "
          f"V{cfg.vocab_size} B{a.batch} MB{a.micro_batch} T{a.seq_len} steps {a.steps} "
          f"({'fp64' if a.fp64 else 'fp32'}, torch {torch.__version__})")
    ref = train(P, cfg, tokens, a)
    rep = Report()
    compare_metrics(rep, metrics, ref, a)
    compare_final(rep, final, P, cfg, a.rtol)
    print(f"{rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


# ----------------------------------------------------------------------------- self-test

SELFTEST_TRAIN = dict(batch=4, seq_len=32, steps=6, lr=1e-3, min_lr=1e-4, warmup=2,
                      schedule="cosine", beta1=0.9, beta2=0.95, eps=1e-6,
                      weight_decay=0.1, grad_clip=1.0)


def selftest_cfg(arch):
    return Config(arch, n_layer=2, n_head=4, n_embd=64, vocab_size=256, max_seq_len=32,
                  n_kv_head=2 if arch == "llama" else 4,
                  ffn_hidden=192 if arch == "llama" else 256)


def selftest_files(d, arch):
    """Write init, a shard that wraps within the run, and this script's own outputs."""
    cfg, t = selftest_cfg(arch), SELFTEST_TRAIN
    init = random_init(cfg, seed=1 if arch == "gpt2" else 2)
    paths = {k: os.path.join(d, f"{arch}_{k}") for k in
             ("init.safetensors", "train.bin", "metrics.jsonl", "final.safetensors")}
    st.write_safetensors(paths["init.safetensors"], init, cfg.metadata())
    n = 3 * t["batch"] * t["seq_len"] + 50   # wraps to position 0 at step 4
    st.write_tokens(paths["train.bin"], np.random.default_rng(3).integers(0, 256, n))
    a = argparse.Namespace(micro_batch=t["batch"], **t)
    P = make_params(init, cfg)
    records = train(P, cfg, st.read_tokens(paths["train.bin"]), a)
    with open(paths["metrics.jsonl"], "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    st.write_safetensors(paths["final.safetensors"],
                         {n: p.detach().numpy() for n, p in P.items()}, cfg.metadata())
    return paths


def cli_args(paths, micro_batch, extra=()):
    t = SELFTEST_TRAIN
    args = ["--init", paths["init.safetensors"], "--data", paths["train.bin"],
            "--metrics", paths["metrics.jsonl"], "--final", paths["final.safetensors"],
            "--micro-batch", str(micro_batch)]
    for k, v in t.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    return args + list(extra)


def run_cli(args):
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)] + args,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


def perturb(path, name, scale):
    tensors, meta = st.read_safetensors(path)
    tensors[name] = tensors[name] * scale
    st.write_safetensors(path, tensors, meta)


def selftest_arch(d, arch, results):
    paths = selftest_files(d, arch)
    # Two micro-batches must reproduce the single-batch run (gradient accumulation).
    rc, out = run_cli(cli_args(paths, micro_batch=2))
    results.append((rc == 0, f"{arch}: own outputs, micro-batch 2 -> rc {rc} ({out.strip().splitlines()[-1]})"))
    if rc != 0:
        print(out)
    rc, out = run_cli(cli_args(paths, micro_batch=4, extra=["--fp64"]))
    results.append((rc == 0, f"{arch}: fp64 reference vs fp32 outputs -> rc {rc} "
                             f"({out.strip().splitlines()[-1]})"))
    name = "h.1.mlp.c_fc.weight" if arch == "gpt2" else "model.layers.1.mlp.up_proj.weight"
    perturb(paths["final.safetensors"], name, 1.001)
    rc, out = run_cli(cli_args(paths, micro_batch=4))
    results.append((rc == 1 and name in "".join(l for l in out.splitlines() if "FAIL" in l),
                    f"{arch}: final {name} scaled by 1.001 -> rc {rc} (want 1)"))
    os.remove(paths["final.safetensors"])
    rc, out = run_cli(cli_args(paths, micro_batch=4))
    results.append((rc == 2, f"{arch}: missing final -> rc {rc} (want 2): {out.strip()}"))


def selftest_formats(results):
    """BF16 encoding must match torch's round-to-nearest-even conversion bit for bit."""
    x = np.concatenate([np.array([1.0, -2.5, 3.14159, 1e-30, 65504.0, np.inf, -np.inf, -0.0],
                                 dtype=np.float32),
                        np.random.default_rng(4).normal(0, 3, 10000).astype(np.float32)])
    ours = st.f32_to_bf16(x)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    back = st.bf16_to_f32(ours)
    ok = np.array_equal(ours, want) and np.array_equal(back, torch.from_numpy(x).to(
        torch.bfloat16).float().numpy())
    results.append((bool(ok), f"bf16 encode/decode matches torch on {x.size} values"))


def grads_of(P, cfg, x, y):
    for p in P.values():
        p.grad = None
    logits = forward(P, cfg, x)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
    return {n: p.grad.clone() for n, p in P.items()}


def selftest_onednn(results):
    """The oneDNN matmul route (used by the benchmark) gives torch.matmul's gradients."""
    for arch in ("gpt2", "llama"):
        cfg = selftest_cfg(arch)
        P = make_params(random_init(cfg, seed=5), cfg)
        x = torch.randint(0, cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(6))
        y = torch.roll(x, -1, dims=1)
        want = grads_of(P, cfg, x, y)
        use_onednn(True)
        try:
            got = grads_of(P, cfg, x, y)
        finally:
            use_onednn(False)
        err = max(tensor_rel_err(got[n].numpy(), want[n].numpy()) for n in want)
        results.append((err < 1e-5, f"{arch}: oneDNN matmul gradients vs torch.matmul, "
                                    f"worst rel err {err:.1e}"))


def selftest():
    torch.set_num_threads(1)
    results = []
    selftest_formats(results)
    selftest_onednn(results)
    with tempfile.TemporaryDirectory(prefix="torch_ref_selftest_") as d:
        for arch in ("gpt2", "llama"):
            selftest_arch(d, arch, results)
    for ok, text in results:
        print(f"  {'ok  ' if ok else 'FAIL'}  {text}")
    failed = sum(not ok for ok, _ in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


# ----------------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--selftest", action="store_true")
    for name in ("init", "data", "metrics", "final"):
        p.add_argument("--" + name)
    for name in ("batch", "micro-batch", "seq-len", "steps", "warmup"):
        p.add_argument("--" + name, type=int)
    for name in ("lr", "min-lr", "beta1", "beta2", "eps", "weight-decay", "grad-clip"):
        p.add_argument("--" + name, type=float)
    p.add_argument("--schedule", choices=("cosine", "constant"))
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fp64", action="store_true", help="compute the reference in float64")
    a = p.parse_args(argv)
    if not a.selftest:
        missing = [k for k, v in vars(a).items() if v is None]
        if missing:
            raise InputError("missing arguments: " + ", ".join("--" + m.replace("_", "-")
                                                                for m in missing))
    return a


def main(argv):
    try:
        a = parse_args(argv)
        return selftest() if a.selftest else check(a)
    except InputError as e:
        print(f"torch_ref: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
