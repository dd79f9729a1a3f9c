#!/usr/bin/env python3
"""A plain-PyTorch peer of scaleinv's mixture-of-experts model (src/engine/models/moe.cpp, docs/moe.md).

The same network as `--model moe` under every multiplier 1: token embedding, `depth` pre-norm
blocks of (RMSNorm with gain, causal multi-head attention with rotary positions, RMSNorm with gain,
a mixture of E SwiGLU experts with top-k softmax routing renormalised over the chosen k, dropless
dispatch: pairs sorted by expert, one matmul per expert, index_add back; the Switch balance loss),
a final RMSNorm and an untied readout; AdamW. Written the way a PyTorch user would write it on the
torch this machine has (1.13: no scaled_dot_product_attention).

    python3 bench/moe_peer.py WIDTH DEPTH STEPS [EXPERTS TOP_K]

Prints one line: width=.. params=.. tokens/s=.. (steps after 2 warm-up steps, batch 16, T 64).
THREADS sets torch.set_num_threads (default: all cores). DEVICE=cuda runs it on the GPU, as a
PyTorch 2.x user would write it there: attention through scaled_dot_product_attention (flash),
the time taken once the device has finished the steps.
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, SEQ, BATCH, HEAD = 256, 64, 16, 16
DEVICE = os.environ.get("DEVICE", "cpu")
SDPA = DEVICE == "cuda" and hasattr(F, "scaled_dot_product_attention")


def swiglu_hidden(d, multiple=16):
    raw = (8 * d + 2) // 3
    return (raw + multiple - 1) // multiple * multiple


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.g = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g


def rotary_tables(T, dh, theta=10000.0):
    freq = theta ** (-2.0 * torch.arange(dh // 2, dtype=torch.float64) / dh)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), freq)
    return torch.cos(ang).float(), torch.sin(ang).float()


def rotate(x, cos, sin):
    a, b = x.chunk(2, -1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.h = d // HEAD
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        cos, sin = rotary_tables(SEQ, HEAD)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.full((SEQ, SEQ), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (m(x).view(B, T, self.h, HEAD).transpose(1, 2) for m in (self.q, self.k, self.v))
        q, k = rotate(q, self.cos[:T], self.sin[:T]), rotate(k, self.cos[:T], self.sin[:T])
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) / math.sqrt(HEAD) + self.mask[:T, :T]
            y = torch.softmax(att, -1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, d))


class MoE(nn.Module):
    def __init__(self, d, E, k):
        super().__init__()
        n = swiglu_hidden(d)
        self.E, self.k = E, k
        self.router = nn.Linear(d, E, bias=False)
        self.w_gate = nn.Parameter(torch.randn(E, n, d) / math.sqrt(d))
        self.w_up = nn.Parameter(torch.randn(E, n, d) / math.sqrt(d))
        self.w_down = nn.Parameter(torch.randn(E, d, n) / math.sqrt(n))

    def forward(self, x):
        B, T, d = x.shape
        flat = x.reshape(-1, d)
        N = flat.shape[0]
        probs = torch.softmax(self.router(flat), -1)
        top_p, top_i = probs.topk(self.k, -1)
        gates = top_p / top_p.sum(-1, keepdim=True)
        assign = top_i.reshape(-1)
        counts = torch.bincount(assign, minlength=self.E)
        balance = self.E * ((counts.float() / (N * self.k)) * probs.mean(0)).sum()
        order = torch.sort(assign, stable=True).indices
        token = order // self.k
        xs = flat[token]
        outs, start = [], 0
        # unbind once: indexing w[j] per expert makes backward fill a zero tensor of the whole stack
        # for each expert (scaleinv's CPU dispatch does the same unbind; on CUDA it batches the experts instead).
        gate, up, down = self.w_gate.unbind(0), self.w_up.unbind(0), self.w_down.unbind(0)
        for j, c in enumerate(counts.tolist()):
            if c == 0:
                continue
            s = xs[start:start + c]
            h = F.silu(s @ gate[j].t()) * (s @ up[j].t())
            outs.append(h @ down[j].t())
            start += c
        w = gates.reshape(-1)[order].unsqueeze(1)
        out = torch.zeros_like(flat).index_add(0, token, torch.cat(outs) * w)
        return out.view(B, T, d), balance


class Block(nn.Module):
    def __init__(self, d, E, k):
        super().__init__()
        self.n1, self.attn, self.n2, self.moe = RMSNorm(d), Attention(d), RMSNorm(d), MoE(d, E, k)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        y, b = self.moe(self.n2(x))
        return x + y, b


class Net(nn.Module):
    def __init__(self, d, L, E, k):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, E, k) for _ in range(L))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, idx, targets, aux_coef=0.01):
        h = self.emb(idx)
        aux = 0.0
        for blk in self.blocks:
            h, b = blk(h)
            aux = aux + b
        logits = self.head(self.norm(h))
        ce = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return ce + aux_coef * aux / len(self.blocks)


def main():
    width, depth, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    E = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    k = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    torch.set_num_threads(int(os.environ.get("THREADS", os.cpu_count())))
    torch.manual_seed(0)
    net = Net(width, depth, E, k).to(DEVICE)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    params = sum(p.numel() for p in net.parameters())

    def step():
        x = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE)
        y = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE)
        loss = net(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def sync():
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    for _ in range(2):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    dt = time.perf_counter() - t0
    print(f"width={width} depth={depth} experts={E} top_k={k} params={params} tokens/s={BATCH * SEQ * steps / dt:.1f}")


if __name__ == "__main__":
    main()
