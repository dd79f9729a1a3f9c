"""examples/python/nanogpt_transfer.py: a nanoGPT-style GPT in plain PyTorch through scaleinv.apply
(the roles scaleinv infers from its shapes, a short training run, the summary's LR fit)."""
import importlib.util
import math
import os
import unittest

import torch

import scaleinv

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "nanogpt_transfer.py")


def load_example():
    spec = importlib.util.spec_from_file_location("nanogpt_transfer", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ng = load_example()


def small_bytes(n=1 << 16):
    """The first 64 KiB of the cached KJV text when there, else the example's own source (any bytes do)."""
    path = ng.kjv_path()
    if os.path.isfile(path) and os.path.getsize(path) >= n:
        with open(path, "rb") as f:
            raw = f.read(n)
    else:
        with open(EXAMPLE, "rb") as f:
            raw = f.read()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


class Roles(unittest.TestCase):
    def plan(self, param):
        torch.manual_seed(0)
        return scaleinv.plan(ng.GPT(256), ng.GPT(64), ng.GPT(128), param=param)

    def test_roles_from_shapes(self):
        p = self.plan("mup")
        by = {t["name"]: t for t in p["tensors"]}
        self.assertAlmostEqual(p["m"], 4.0)
        self.assertEqual(p["blocks"], 2)
        for name in ("wte.weight", "wpe.weight"):
            self.assertEqual(by[name]["role"], "embedding", name)
            self.assertFalse(by[name]["in_block"], name)
        self.assertEqual(by["lm_head.weight"]["role"], "readout")
        self.assertFalse(by["lm_head.weight"]["in_block"])
        for i in range(2):
            for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                t = by[f"h.{i}.{m}.weight"]
                self.assertEqual(t["role"], "hidden", t["name"])
                self.assertTrue(t["in_block"], t["name"])
                self.assertEqual(by[f"h.{i}.{m}.bias"]["role"], "vector")
            for ln in ("ln_1", "ln_2"):
                for pn in ("weight", "bias"):
                    self.assertEqual(by[f"h.{i}.{ln}.{pn}"]["role"], "vector")
        self.assertEqual(by["ln_f.weight"]["role"], "vector")
        self.assertFalse(by["ln_f.weight"]["in_block"])
        # every tensor has a role and nothing is left over
        self.assertEqual(len(by), len(list(ng.GPT(256).parameters())))

    def test_attention_note_is_met_by_a_fixed_head_dimension(self):
        mup, std = self.plan("mup"), self.plan("standard")
        self.assertTrue(any("attention logits" in n for n in mup["notes"]), mup["notes"])
        for p in (mup, std):
            model = ng.GPT(256)
            s = model.set_attn_logit(p["shifted"]["attn_logit"])
            self.assertAlmostEqual(s, 1 / math.sqrt(ng.D_HEAD), places=12)
            self.assertEqual(model.h[0].attn.n_head, 256 // ng.D_HEAD)


class Training(unittest.TestCase):
    def test_loss_decreases_in_20_steps_at_width_64_under_mup(self):
        torch.set_num_threads(1)
        data = small_bytes()
        train, held = ng.split(data)
        steps, batch, seq = 20, 8, 64
        offsets = ng.train_offsets(len(train), seq, steps, batch, seed=0)
        ev = ng.eval_offsets(len(held), seq, 64)
        r = ng.train_run(64, "mup", 2.0 ** -7, train, held, offsets, ev, seq_len=seq, warmup=2, log_every=5)
        self.assertFalse(r["diverged"])
        self.assertTrue(all(math.isfinite(v) for v in (r["initial_loss"], r["eval"], r["train_last100"])))
        # nanoGPT's small init: the first loss is about ln 256 = 5.55 (a uniform guess over bytes)
        self.assertLess(abs(r["initial_loss"] - math.log(256)), 0.1, r["initial_loss"])
        last = r["curve"][-1][1]  # mean train loss over steps 16..20
        self.assertLess(last, r["initial_loss"] - 1.5, r["curve"])
        self.assertLess(r["eval"], r["initial_loss"] - 1.5, r["eval"])

    def test_mup_and_standard_coincide_at_the_base_width(self):
        data = small_bytes()
        train, held = ng.split(data)
        offsets = ng.train_offsets(len(train), 64, 5, 4, seed=1)
        ev = ng.eval_offsets(len(held), 64, 8)
        a, b = (ng.train_run(64, p, 2.0 ** -7, train, held, offsets, ev, warmup=1) for p in ("mup", "standard"))
        self.assertAlmostEqual(a["eval"], b["eval"], places=5)


class TuneSmallTrainBig(unittest.TestCase):
    """examples/python/nanogpt_tune_small_train_big.py's four stages at toy size: a halving search,
    a width sweep around its best, the report and the prediction, and the check at the target."""

    def test_the_loop_on_the_new_api(self):
        import sqlite3
        import subprocess
        import tempfile
        spec = importlib.util.spec_from_file_location(
            "nanogpt_tune_small_train_big", os.path.join(os.path.dirname(EXAMPLE), "nanogpt_tune_small_train_big.py"))
        loop = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loop)
        torch.set_num_threads(1)
        with tempfile.TemporaryDirectory() as d:
            r = loop.run(d, [32, 64], 128, steps=9, trials=3, seeds=1, lrs_around=1, data=small_bytes(), progress=False)
            self.assertEqual(set(r["best"]), {"lr_log2", "init_scale", "emb_mult", "out_mult", "warmup_frac"})
            with sqlite3.connect(os.path.join(d, "search.db")) as c:
                self.assertEqual(c.execute("SELECT COUNT(*) FROM points").fetchone()[0], 3 + 1 + 1)  # rungs of 1, 3, 9 steps
            with sqlite3.connect(os.path.join(d, "width.db")) as c:
                self.assertEqual(c.execute("SELECT COUNT(*) FROM points").fetchone()[0], 2 * 3)
            p = r["prediction"].predictions[0]
            self.assertEqual((p["axis"], p["target"]), ("width", 128))
            if p["status"] == "predicted":
                self.assertEqual(len(r["check"]), 3)
                self.assertAlmostEqual(r["check"][1][0], round(p["lr_log2"], 2))
            out = subprocess.run([os.environ.get("SCALEINV_BIN", "scaleinv"), "transfer-report", "--db",
                                  os.path.join(d, "width.db"), "--out", os.path.join(d, "rep")], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)


class Summary(unittest.TestCase):
    def test_parabola_vertex_and_flags(self):
        xs = [-10, -9, -8, -7, -6]
        ls = [2.0 + 0.1 * (x + 7.6) ** 2 for x in xs]
        x, l, flag = ng.best_lr(xs, ls)
        self.assertAlmostEqual(x, -7.6, places=9)
        self.assertEqual(flag, "")
        self.assertEqual(ng.best_lr(xs, [5, 4, 3, 2, 1])[::2], (-6, "edge"))
        self.assertEqual(ng.best_lr(xs, [5, 4, 3, 2, None])[::2], (-7, "neighbour diverged"))
        self.assertEqual(ng.best_lr(xs, [None, 4, 3, 2, 2.5])[2], "")
        self.assertEqual(ng.best_lr(xs, [None] * 5)[2], "all diverged")

    def test_shift_verdicts(self):
        runs = []
        for param, opt in (("mup", {64: -7.0, 256: -7.5}), ("standard", {64: -7.0, 256: -9.0})):
            for w, o in opt.items():
                for x in range(-11, -4):
                    runs.append({"param": param, "width": w, "lr": 2.0 ** x, "log2_lr": float(x),
                                 "eval": 2.0 + 0.1 * (x - o) ** 2})
        rows, shifts = ng.summarize(runs, ["mup", "standard"], [64, 256])
        self.assertAlmostEqual(shifts["mup"]["shift_doublings"], -0.5, places=9)
        self.assertTrue(shifts["mup"]["met"])
        self.assertAlmostEqual(shifts["standard"]["shift_doublings"], -2.0, places=9)
        self.assertTrue(shifts["standard"]["met"])
        self.assertFalse(shifts["standard"]["provisional"])


if __name__ == "__main__":
    unittest.main()
