"""Roles and the coordinate check on modules people really use: torchvision's
VisionTransformer (class token and position embedding as bare parameters, packed in_proj_weight,
zero-initialized head), a nanoGPT-style GPT with tied embeddings, a llama2.c-style SwiGLU whose
hidden size is rounded up to a multiple (dimensions growing by different factors), LSTM/GRU,
convolutions whose channels grow, bare expert weights [E, 4d, d]. All written here or imported from
torchvision; nothing of another project is copied."""
import math
import unittest

import torch
import torch.nn.functional as F
from torch import nn

import scaleinv

try:
    from torchvision.models.vision_transformer import VisionTransformer
except ImportError:  # python3-torchvision (scripts/setup.sh installs it)
    VisionTransformer = None


def roles(plan):
    return {t["name"]: t for t in plan["tensors"]}


def vit(width, layers=2):
    return VisionTransformer(image_size=16, patch_size=4, num_layers=layers, num_heads=width // 32,
                             hidden_dim=width, mlp_dim=4 * width, num_classes=10)


def images(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)


# ---- a nanoGPT-style GPT, tied (written for this test) ----
class Attention(nn.Module):
    def __init__(self, d, d_head=16):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.h = d // d_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(d), nn.LayerNorm(d)
        self.fc, self.out = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TiedGPT(nn.Module):
    def __init__(self, d, depth=2, vocab=64, seq=16, tied=True, head_mult=1.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.head_mult = head_mult
        if tied:
            self.wte.weight = self.lm_head.weight  # as nanoGPT ties them
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head_mult * self.lm_head(self.ln_f(x))


def lm_loss(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def lm_steps(model, opt, x, y, steps, after_step=None):
    """`steps` optimizer steps of the LM on one batch (x, y); each step's loss, detached; after_step()
    runs after each step (a snapshot, say)."""
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if after_step is not None:
            after_step()
    return losses


def tokens(n=4, seq=16, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, seq + 1), generator=g)
    return x[:, :-1], x[:, 1:]


# ---- a llama2.c-style FFN: hidden = multiple_of * ceil(8/3 d / multiple_of) ----
class SwiGLU(nn.Module):
    def __init__(self, d, multiple_of=32, vocab=64):
        super().__init__()
        hidden = multiple_of * ((int(2 * 4 * d / 3) + multiple_of - 1) // multiple_of)
        self.emb = nn.Embedding(vocab, d)
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.norm = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        x = x + self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.head(x * self.norm)


class Experts(nn.Module):
    """A mixture's experts as one bare parameter [E, 4d, d] (and a bare position table [1, n, d])."""

    def __init__(self, d, E=4, n=8):
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(1, n, d))
        self.w_in = nn.Parameter(torch.randn(E, 4 * d, d) / math.sqrt(d))
        self.w_out = nn.Parameter(torch.randn(E, d, 4 * d) / math.sqrt(4 * d))

    def forward(self, x):
        return x


class MoeBlocks(nn.Module):
    """Two blocks, each a router nn.Linear(d, E) and bare experts [E, 4d, d] (a plain-PyTorch mixture)."""

    def __init__(self, d, E=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict({"router": nn.Linear(d, E, bias=False)}) for _ in range(2))
        for b in self.blocks:
            b.register_parameter("experts", nn.Parameter(torch.randn(E, 4 * d, d) / math.sqrt(d)))

    def forward(self, x):
        return x


class Roles(unittest.TestCase):
    def test_mixture_roles_from_shapes(self):
        # A router: fan-in grows, fan-out E fixed, inside a repeated block (a readout never is).
        r = roles(scaleinv.plan(MoeBlocks(128), MoeBlocks(32), MoeBlocks(64), param="mup"))
        self.assertEqual(r["blocks.0.router.weight"]["role"], "router", r["blocks.0.router.weight"])
        self.assertEqual(r["blocks.1.experts"]["role"], "expert", r["blocks.1.experts"])
        # Under mup the router takes the readout row: Adam LR 1/m with its multiplier folded in (m = 4),
        # as the ViT's head.
        self.assertAlmostEqual(r["blocks.0.router.weight"]["lr"], 0.25)

    @unittest.skipIf(VisionTransformer is None, "torchvision is not installed")
    def test_vit_roles_from_owners_and_bare_parameters(self):
        r = roles(scaleinv.plan(vit(128), vit(64), vit(96), param="mup"))
        self.assertEqual(r["class_token"]["role"], "vector")
        self.assertIn("bare parameter with one growing dimension", r["class_token"]["why"])
        self.assertEqual(r["encoder.pos_embedding"]["role"], "vector")
        self.assertEqual(r["conv_proj.weight"]["role"], "embedding")  # [d, 3, 4, 4]: fan-in 48 fixed
        self.assertEqual(r["encoder.layers.encoder_layer_0.self_attention.in_proj_weight"]["role"], "hidden")
        self.assertEqual(r["encoder.layers.encoder_layer_0.self_attention.out_proj.weight"]["role"], "hidden")
        self.assertEqual(r["encoder.layers.encoder_layer_0.mlp.0.weight"]["role"], "hidden")
        self.assertEqual(r["heads.head.weight"]["role"], "readout")
        self.assertEqual(r["encoder.layers.encoder_layer_0.ln_1.weight"]["role"], "vector")
        # mup with Adam: hidden LR 1/m, readout LR 1/m (its multiplier folded in), vectors 1.
        self.assertAlmostEqual(r["encoder.layers.encoder_layer_0.mlp.0.weight"]["lr"], 0.5)
        self.assertAlmostEqual(r["class_token"]["lr"], 1.0)

    def test_bare_parameters_read_by_their_growing_dimensions(self):
        r = roles(scaleinv.plan(Experts(128), Experts(32), Experts(64), param="mup"))
        self.assertEqual(r["pos"]["role"], "vector")
        for name in ("w_in", "w_out"):
            # [E, out, in] with E fixed: E experts' matrices (docs/moe.md), under mup the hidden row.
            self.assertEqual(r[name]["role"], "expert", r[name])
            self.assertIn("E experts", r[name]["why"])
        self.assertEqual((r["w_in"]["fan_out"], r["w_in"]["fan_in"]), (512, 128))
        self.assertAlmostEqual(r["w_in"]["lr"], 0.25)  # mup Adam: 1 / fan-in ratio

    def test_dimensions_growing_by_different_factors_use_their_own_ratio(self):
        # d 64 -> 128: hidden 192 -> 352 (x1.83), as llama2.c's multiple_of rounding.
        p = scaleinv.plan(SwiGLU(128), SwiGLU(64), SwiGLU(96), param="mup")
        r = roles(p)
        self.assertEqual(r["w1.weight"]["role"], "hidden")
        self.assertAlmostEqual(r["w1.weight"]["m"], 2.0)
        self.assertAlmostEqual(r["w1.weight"]["lr"], 0.5)         # fan-in d: x2
        self.assertAlmostEqual(r["w2.weight"]["m"], 352 / 192)
        self.assertAlmostEqual(r["w2.weight"]["lr"], 192 / 352)   # fan-in hidden: x1.83
        self.assertAlmostEqual(r["head.weight"]["lr"], 0.5)
        self.assertEqual(r["norm"]["role"], "vector")
        with self.assertRaises(scaleinv.UserError) as e:  # a base larger than the model: shrinks
            scaleinv.plan(SwiGLU(64), SwiGLU(128), SwiGLU(256), param="mup")
        self.assertIn("shrinks", str(e.exception))

    def test_rnn_conv_and_attention_layouts(self):
        def rnn(d):
            return nn.ModuleDict({"lstm": nn.LSTM(16, d), "gru": nn.GRU(d, d), "head": nn.Linear(d, 10)})
        r = roles(scaleinv.plan(rnn(128), rnn(32), rnn(64), param="mup"))
        self.assertEqual(r["lstm.weight_ih_l0"]["role"], "embedding")
        self.assertEqual(r["lstm.weight_hh_l0"]["role"], "hidden")
        self.assertEqual(r["gru.weight_ih_l0"]["role"], "hidden")
        self.assertEqual(r["lstm.bias_ih_l0"]["role"], "vector")

        def cnn(c):
            return nn.Sequential(nn.Conv2d(3, c, 3), nn.Conv2d(c, 2 * c, 3), nn.Conv2d(2 * c, 2 * c, 3, groups=2 * c),
                                 nn.Flatten(), nn.LazyLinear(10) if False else nn.Linear(2 * c, 10))
        r = roles(scaleinv.plan(cnn(64), cnn(16), cnn(32), param="mup"))
        self.assertEqual(r["0.weight"]["role"], "embedding")
        self.assertEqual(r["1.weight"]["role"], "hidden")
        self.assertEqual(r["2.weight"]["role"], "embedding")  # depthwise [2c, 1, 3, 3]: fan-in fixed
        self.assertEqual(r["4.weight"]["role"], "readout")
        self.assertFalse(any("attention" in n for n in scaleinv.plan(rnn(128), rnn(32), rnn(64))["notes"]))

        def mha(d):
            return nn.ModuleDict({"emb": nn.Embedding(10, d), "att": nn.MultiheadAttention(d, d // 16)})
        p = scaleinv.plan(mha(128), mha(32), mha(64), param="mup")
        r = roles(p)
        self.assertEqual(r["att.in_proj_weight"]["role"], "hidden")
        self.assertEqual(r["att.in_proj_bias"]["role"], "vector")
        self.assertTrue(any("attention logits" in n and "if the model" not in n for n in p["notes"]))


class TiedEmbeddings(unittest.TestCase):
    def test_plan_gives_the_embedding_treatment_and_the_readout_multiplier(self):
        p = scaleinv.plan(TiedGPT(128), TiedGPT(32), TiedGPT(64), param="mup", optimizer="adamw")
        r = roles(p)
        self.assertEqual(r["wte.weight"]["role"], "embedding")  # the first name named_parameters gives
        self.assertIn("tied", r["wte.weight"]["why"])
        self.assertNotIn("lm_head.weight", r)
        self.assertEqual(len(p["ties"]), 1)
        tie = p["ties"][0]
        self.assertEqual((tie["tensor"], tie["use"], tie["readout"]), ("wte.weight", "lm_head.weight", "lm_head.weight"))
        self.assertAlmostEqual(tie["exponent"], 1.0)     # mup: a_r + b_r - (a_e + b_e) = 1
        self.assertAlmostEqual(tie["multiplier"], 0.25)  # m = 4
        self.assertAlmostEqual(r["wte.weight"]["lr"], 1.0)  # the embedding's LR
        std = scaleinv.plan(TiedGPT(128), TiedGPT(32), TiedGPT(64), param="standard")
        self.assertAlmostEqual(std["ties"][0]["multiplier"], 0.5)  # the readout's init 1/sqrt(d), from b_e = 0
        sgd = scaleinv.plan(TiedGPT(128), TiedGPT(32), TiedGPT(64), param="mup", optimizer="sgd")
        self.assertAlmostEqual(sgd["ties"][0]["multiplier"], 4 ** -sgd["ties"][0]["exponent"])

    def test_tie_matches_the_readout_init_for_every_row(self):
        # Init-matched: the readout use starts at the untied readout's init, m^-(a_r + b_r), from a
        # tensor stored at the embedding's. Where it differs from the update-matched exponent
        # (a_r - a_e) + (c_r - c_e) / q (standard, sp, ntk), the latter was measured to break every
        # h', W' at step 0 (test below).
        for param in scaleinv.presets():
            t = scaleinv.table(param)["roles"]
            if param in ("unit", "u-mup"):  # unit-scaled rows: apply refuses them
                continue
            r, e = t["readout"], t["embedding"]
            for opt in ("adamw", "sgd"):
                tie = scaleinv.plan(TiedGPT(128), TiedGPT(32), TiedGPT(64), param=param, optimizer=opt)["ties"][0]
                self.assertAlmostEqual(tie["exponent"], (r["a"] + r["b"]) - (e["a"] + e["b"]), msg=(param, opt))

    def test_tied_gpt_under_sp_is_judged_as_sp(self):
        # sp's readout (init 1/sqrt(d), LR 1/d) is where the init- and update-matched ties differ
        # (1/2 against 1). Init-matched, the tied GPT follows sp's table: every row matches, sp's own
        # logit growth included (seed 000: W_r,0 dh ~ d^1/2). Update-matched, it would be mup:
        # h' and W' of every layer at step 0 ~ d^-1 against sp's d^-1/2, and the logit update flat
        # against sp's d^1/2 (19-20 deviating rows on these batches).
        torch.set_num_threads(1)
        r = scaleinv.coordcheck(lambda w: TiedGPT(w), widths=[64, 128, 256], batches=[tokens()], param="sp",
                                optimizer="adamw", lr=1e-3, steps=2, seeds=3, loss=lm_loss, progress=False,
                                quantities=["h", "dh", "h'", "W'"])
        self.assertFalse([f for f in r.failures if "deviates" in f], r.failures)
        dh = {row["step"]: row for row in r.rows if row["module"] == "lm_head" and row["quantity"] == "dh"}
        self.assertEqual(dh[1]["predicted"], 0.5)
        self.assertTrue(dh[1]["matches"], dh[1])

    def test_tied_model_trains_as_the_same_model_with_its_multiplier_written_out(self):
        x, y = tokens()
        losses = []
        for explicit in (False, True):
            torch.manual_seed(1)
            model = TiedGPT(128)
            base, delta = TiedGPT(32), TiedGPT(64)
            opt = scaleinv.apply(model, base, delta, param="mup", optimizer="adamw", lr=3e-3)
            if explicit:  # the hook off, the multiplier in the forward instead
                for h in model.scaleinv_hooks:
                    h.remove()
                model.head_mult = opt.scaleinv_plan["ties"][0]["multiplier"]
            run = []
            for _ in range(5):
                loss = lm_loss(model(x), y)
                run.append(loss.item())
                opt.zero_grad()
                loss.backward()
                opt.step()
            losses.append(run)
        self.assertEqual(losses[0], losses[1])
        self.assertLess(losses[0][-1], losses[0][0])

    def test_apply_twice_is_refused_and_changes_nothing(self):
        model = TiedGPT(64)
        scaleinv.apply(model, TiedGPT(32), TiedGPT(64), param="mup")
        before = [p.detach().clone() for p in model.parameters()]
        with self.assertRaises(scaleinv.UserError) as e:
            scaleinv.apply(model, TiedGPT(32), TiedGPT(64), param="mup")
        self.assertIn("already", str(e.exception))
        for a, b in zip(before, model.parameters()):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(len(model.scaleinv_hooks), 1)

    def test_coordcheck_of_the_tied_gpt_passes_mup_and_fails_standard(self):
        torch.set_num_threads(1)
        kw = dict(widths=[64, 128, 256], batches=[tokens()], optimizer="adamw", lr=1e-2, steps=3, seeds=3,
                  loss=lm_loss, progress=False, quantities=["h", "dh", "h'", "W'", "dW"])
        mup = scaleinv.coordcheck(lambda w: TiedGPT(w), param="mup", **kw)
        self.assertTrue(mup.passed, "\n".join(mup.failures))
        # Three widths: no row gets the second look past the 1/d term (it needs 4).
        self.assertTrue(all(r["past_finite_width"] is None for r in mup.rows))
        # The hooked readout's output is judged as the logits of a tied readout: no iid exponent at
        # init (the readout is the input embedding, aligned with the stream), but stable; its
        # update dh ~ d^0 as any mup readout's.
        logits = {(r["quantity"], r["step"]): r for r in mup.rows if r["module"] == "lm_head"}
        self.assertIsNone(logits[("h", 0)]["predicted"])
        self.assertIn("tied readout", logits[("h", 0)]["maps_to"])
        self.assertTrue(logits[("h", 0)]["stable"])
        for t in (1, 2, 3):
            self.assertEqual(logits[("dh", t)]["predicted"], 0.0)
            self.assertTrue(logits[("dh", t)]["matches"])
        std = scaleinv.coordcheck(lambda w: TiedGPT(w), param="standard", **kw)
        self.assertFalse(std.passed)
        # standard's own instability: the blocks' updates grow with width (AdamW at a global LR)
        self.assertTrue(any(f.startswith("dh blocks.") and "unstable" in f for f in std.failures), std.failures)


@unittest.skipIf(VisionTransformer is None, "torchvision is not installed")
class VitCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        kw = dict(widths=[64, 128, 256], batches=[images()], optimizer="adamw", lr=1e-2, steps=3, seeds=3,
                  progress=False, quantities=["h", "dh", "h'", "W'", "dW"])
        cls.mup = scaleinv.coordcheck(lambda w: vit(w), param="mup", **kw)
        cls.std = scaleinv.coordcheck(lambda w: vit(w), param="standard", **kw)

    def test_zero_initialized_head_is_a_state_not_a_failure(self):
        zero = [r for r in self.mup.rows if r["zero"]]
        self.assertTrue(any(r["module"] == "heads.head" and r["quantity"] == "h" and r["step"] == 0 for r in zero))
        # The first update reaches only the head: below it, dh and dW are zero at step 1 too.
        self.assertTrue(all(r["step"] == 0 or (r["step"] == 1 and r["quantity"] in ("dh", "dW")) for r in zero),
                        [(r["module"], r["quantity"], r["step"]) for r in zero if r["step"] > 1])
        self.assertTrue(all("zero" in r["maps_to"] for r in zero))
        after = [r for r in self.mup.rows if r["module"] == "heads.head" and r["quantity"] == "h" and r["step"] >= 1]
        self.assertTrue(after and all(not r["zero"] and r["matches"] for r in after), after)

    def test_mup_passes_and_standard_fails_without_overrides(self):
        self.assertTrue(self.mup.passed, "\n".join(self.mup.failures))
        self.assertFalse(self.std.passed)


class Schedules(unittest.TestCase):
    def _opt(self):
        return scaleinv.apply(TiedGPT(128, tied=False), TiedGPT(32, tied=False), TiedGPT(64, tied=False),
                              param="mup", lr=1e-2)

    def test_schedules_that_keep_the_ratios(self):
        S = torch.optim.lr_scheduler
        makers = {
            "lr_schedule": lambda o: scaleinv.lr_schedule(o, lambda s: min(1.0, (s + 1) / 10)),
            "LinearLR": lambda o: S.LinearLR(o, start_factor=0.1, total_iters=20),
            "CosineAnnealingLR(eta_min=0)": lambda o: S.CosineAnnealingLR(o, T_max=50),
            "SequentialLR": lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, total_iters=5),
                                                         S.CosineAnnealingLR(o, T_max=40)], milestones=[5]),
            "StepLR": lambda o: S.StepLR(o, 10, 0.5),
        }
        for name, make in makers.items():
            with self.subTest(name):
                opt = self._opt()
                lrs = [g["lr"] for g in opt.param_groups]
                self.assertGreater(len(set(round(v, 12) for v in lrs)), 1)
                sched = make(opt)
                self.assertIsNone(scaleinv.check_schedule(sched, steps=60))
                self.assertEqual([g["lr"] for g in opt.param_groups], [g["lr"] for g in opt.param_groups])

    def test_schedules_that_flatten_the_ratios_are_named(self):
        S = torch.optim.lr_scheduler
        makers = {
            "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, T_max=50, eta_min=1e-4),
            "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=1e-2, total_steps=100),
            "ReduceLROnPlateau": lambda o: S.ReduceLROnPlateau(o, patience=1, min_lr=1e-4),
        }
        for name, make in makers.items():
            with self.subTest(name):
                opt = self._opt()
                before = [g["lr"] for g in opt.param_groups]
                sched = make(opt)
                after_init = [g["lr"] for g in opt.param_groups]
                with self.assertRaises(scaleinv.UserError) as e:
                    scaleinv.check_schedule(sched, steps=99)
                self.assertIn(name, str(e.exception))
                self.assertIn("fix:", str(e.exception))
                self.assertEqual(len(str(e.exception).splitlines()), 1)
                self.assertEqual([g["lr"] for g in opt.param_groups], after_init)  # the user's untouched
                del before


if __name__ == "__main__":
    unittest.main()
