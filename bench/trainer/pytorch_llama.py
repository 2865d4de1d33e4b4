#!/usr/bin/python3
"""The same Llama-style decoder and training step as Meridian's trainer, written in PyTorch
(Debian's python3-torch 1.13), for the tokens/s comparison in run_vs_pytorch.sh. Not a
reference for correctness (tests/trainer does that in C++); the same shapes, ops and optimizer.

usage: pytorch_llama.py CONFIG.yaml STEPS [fp32|bf16]  -> one JSON line
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
import yaml


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    b, t, h, d = x.shape
    p = x.reshape(b, t, h, d // 2, 2)
    x0, x1 = p[..., 0], p[..., 1]
    c = cos[:t].view(1, t, 1, d // 2).to(x.dtype)
    s = sin[:t].view(1, t, 1, d // 2).to(x.dtype)
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).view(b, t, h, d)


class Block(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        d, self.h, self.kv = m["hidden"], m["heads"], m["kv_heads"]
        self.hd = d // self.h
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.attention_norm = RMSNorm(d, m.get("norm_eps", 1e-5))
        self.wq, self.wk = lin(d, d), lin(d, self.kv * self.hd)
        self.wv, self.wo = lin(d, self.kv * self.hd), lin(d, d)
        self.ffn_norm = RMSNorm(d, m.get("norm_eps", 1e-5))
        self.w1, self.w2, self.w3 = lin(d, m["ffn"]), lin(m["ffn"], d), lin(d, m["ffn"])

    def forward(self, h, cos, sin):
        b, t, _ = h.shape
        x = self.attention_norm(h)
        q = rope(self.wq(x).view(b, t, self.h, self.hd), cos, sin).transpose(1, 2)
        k = rope(self.wk(x).view(b, t, self.kv, self.hd), cos, sin).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        rep = self.h // self.kv
        if rep > 1:
            k = k.unsqueeze(2).expand(b, self.kv, rep, t, self.hd).reshape(b, self.h, t, self.hd)
            v = v.unsqueeze(2).expand(b, self.kv, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        o = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
        h = h + self.wo(o.transpose(1, 2).reshape(b, t, -1))
        x = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(x)) * self.w3(x))


class Llama(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m["hidden"]
        self.tok_embeddings = torch.nn.Embedding(m["vocab"], d)
        self.layers = torch.nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.norm = RMSNorm(d, m.get("norm_eps", 1e-5))
        self.output = torch.nn.Linear(d, m["vocab"], bias=False)
        hd = d // m["heads"]
        i = torch.arange(0, hd // 2, dtype=torch.float64)
        ang = torch.outer(torch.arange(0, m["seq_len"], dtype=torch.float64),
                          m.get("rope_theta", 10000.0) ** (-2.0 * i / hd))
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())
        for name, p in self.named_parameters():
            if "norm" not in name:
                std = 0.02 / math.sqrt(2 * m["layers"]) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        return self.output(self.norm(h))


def run(cfg, steps, bf16):
    m, t = cfg["model"], cfg.get("train", {})
    torch.manual_seed(0)
    model = Llama(m)
    opt = torch.optim.AdamW(model.parameters(), lr=t.get("lr", 3e-4), betas=(0.9, 0.95),
                            weight_decay=t.get("weight_decay", 0.1), eps=1e-8)
    B, T = t.get("batch", 4), m["seq_len"]
    data = torch.randint(0, m["vocab"], (steps + 2, B, T + 1))

    def step(i):
        batch = data[i]
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(batch[:, :T])
        loss = F.cross_entropy(logits.float().reshape(-1, m["vocab"]), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.get("grad_clip", 1.0))
        opt.step()
        return loss.item()

    step(0), step(1)  # warm-up, as the C++ benchmark
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        step(2 + i)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"impl": "pytorch", "torch": torch.__version__, "model": m["name"],
            "bf16_autocast": bf16, "steps": steps, "seconds": dt,
            "tokens_per_s": steps * B * T / dt, "tokens_per_cpu_s": steps * B * T / cpu}


def main():
    torch.set_num_threads(1)
    cfg = yaml.safe_load(open(sys.argv[1]))
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    bf16 = sys.argv[3] == "bf16" if len(sys.argv) > 3 else False
    print(json.dumps(run(cfg, steps, bf16)), flush=True)


if __name__ == "__main__":
    main()
