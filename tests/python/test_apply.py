"""scaleinv.apply on models written in plain PyTorch (src/brain/adapt/own_model.h, seed 000 eq. 28)."""
import math
import unittest

import torch
from torch import nn

import scaleinv


class MLP(nn.Module):
    """The muP paper's MLP: in -> w -> w -> classes, ReLU, no bias. `mult` puts a forward multiplier
    on each layer (the table's m^-a), for the equivalence test."""

    def __init__(self, width, d_in=32, classes=10, mult=(1.0, 1.0, 1.0)):
        super().__init__()
        self.fc1 = nn.Linear(d_in, width, bias=False)
        self.fc2 = nn.Linear(width, width, bias=False)
        self.head = nn.Linear(width, classes, bias=False)
        self.mult = mult

    def forward(self, x):
        x = torch.relu(self.mult[0] * self.fc1(x))
        x = torch.relu(self.mult[1] * self.fc2(x))
        return self.mult[2] * self.head(x)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 2 * width)
        self.proj = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.proj(torch.relu(self.fc(self.norm(x))))


class TinyLM(nn.Module):
    def __init__(self, width, depth, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.out = nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def rms(t):
    return float(t.detach().double().pow(2).mean().sqrt())


class Roles(unittest.TestCase):
    def test_mlp_roles_from_shapes(self):
        torch.manual_seed(0)
        p = scaleinv.plan(MLP(256), MLP(64), MLP(128), param="mup")
        roles = {t["name"]: t["role"] for t in p["tensors"]}
        self.assertEqual(roles, {"fc1.weight": "embedding", "fc2.weight": "hidden", "head.weight": "readout"})
        self.assertAlmostEqual(p["m"], 4.0)
        self.assertAlmostEqual(p["k"], 1.0)
        self.assertFalse(any(t["in_block"] for t in p["tensors"]))

    def test_embedding_layout_blocks_and_depth(self):
        torch.manual_seed(0)
        p = scaleinv.plan(TinyLM(128, 4), TinyLM(32, 2), TinyLM(64, 2), param="depth-mup")
        by = {t["name"]: t for t in p["tensors"]}
        self.assertEqual(by["emb.weight"]["role"], "embedding")  # [vocab, width]: in_out layout
        self.assertEqual(by["out.weight"]["role"], "readout")
        self.assertEqual(by["blocks.3.fc.weight"]["role"], "hidden")
        self.assertEqual(by["blocks.3.fc.bias"]["role"], "vector")
        self.assertEqual(by["blocks.0.norm.weight"]["role"], "vector")
        self.assertTrue(by["blocks.3.proj.weight"]["in_block"])
        self.assertFalse(by["emb.weight"]["in_block"])
        self.assertAlmostEqual(p["m"], 4.0)
        self.assertAlmostEqual(p["k"], 2.0)
        self.assertEqual(p["blocks"], 4)

    def test_sequential_layers_of_different_shapes_are_not_blocks(self):
        mk = lambda w: nn.Sequential(nn.Linear(8, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 3))
        p = scaleinv.plan(mk(64), mk(16), mk(32))
        by = {t["name"]: t for t in p["tensors"]}
        self.assertEqual([by[n]["role"] for n in ("0.weight", "2.weight", "4.weight")],
                         ["embedding", "hidden", "readout"])
        self.assertFalse(any(t["in_block"] for t in p["tensors"]))

    def test_override_sets_a_role_that_fits_and_refuses_one_that_does_not(self):
        p = scaleinv.plan(MLP(256), MLP(64), MLP(128), overrides={r"^head\.": "readout", r"fc2": "attn_v"})
        self.assertEqual({t["name"]: t["role"] for t in p["tensors"]}["fc2.weight"], "attn_v")
        with self.assertRaises(scaleinv.UserError) as e:
            scaleinv.plan(MLP(256), MLP(64), MLP(128), overrides={r"fc2": "embedding"})
        self.assertIn("fc2.weight", str(e.exception))
        self.assertEqual(str(e.exception).count("\n"), 0)


class Errors(unittest.TestCase):
    def check(self, fn, *words):
        with self.assertRaises(scaleinv.UserError) as e:
            fn()
        msg = str(e.exception)
        self.assertEqual(msg.count("\n"), 0, msg)
        for w in words:
            self.assertIn(w, msg)
        self.assertIn("fix", msg)

    def test_optimizers_are_the_rows(self):
        """apply builds the torch class of the kind's row (src/brain/optim/optimizer_kinds.h), and refuses a
        kind without one, naming it."""
        import json
        import _scaleinv
        from scaleinv import _apply
        rows = {r["kind"]: r for r in json.loads(_scaleinv.optimizer_kinds())}
        self.assertEqual(_apply.OPTIMIZERS, tuple(k for k, r in rows.items() if r["python_class"]))
        self.assertEqual(set(_apply.OPTIMIZERS), {"sgd", "adam", "adamw"})
        for kind in _apply.OPTIMIZERS:
            opt = scaleinv.apply(MLP(64), MLP(64), MLP(128), optimizer=kind, lr=1e-2)
            self.assertIs(type(opt), getattr(torch.optim, rows[kind]["python_class"]), kind)
            self.assertEqual("eps" in opt.param_groups[0], rows[kind]["eps"] != "none", kind)
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(128), optimizer="muon"), "optimizer", "muon")

    def test_bad_inputs_name_the_tensor_or_field(self):
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(64)), "delta")
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(128), param="nope"), "nope")
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(128), optimizer="lion"), "optimizer")
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(128), optimizer="adam", weight_decay=0.1),
                   "weight_decay", "adamw")
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(128), overrides={"(": "hidden"}), "regular")
        self.check(lambda: scaleinv.plan(MLP(64), MLP(64), MLP(128), overrides={"fc": "nope"}), "nope")
        # a dimension that is not a width dimension changes
        self.check(lambda: scaleinv.plan(MLP(128, classes=7), MLP(64), MLP(128)), "head.weight", "width dimension")
        # dimensions growing by different factors are planned, each with its ratio; shrinking is refused
        odd = lambda w: nn.Sequential(nn.Linear(8, w), nn.Linear(w, w * w // 16), nn.Linear(w * w // 16, 3))
        self.assertAlmostEqual({t["name"]: t for t in scaleinv.plan(odd(64), odd(16), odd(32))["tensors"]}
                               ["2.weight"]["m"], 16.0)
        self.check(lambda: scaleinv.plan(odd(16), odd(32), odd(64)), "0.weight", "shrinks")

    def test_tied_weights_of_two_other_roles_are_refused_naming_the_tensor(self):
        def tied(w):  # an embedding and its readout: planned (test_real_modules.TiedEmbeddings)
            m = TinyLM(w, 1)
            m.out.weight = m.emb.weight
            return m
        self.assertEqual(len(scaleinv.plan(tied(64), tied(16), tied(32))["ties"]), 1)

        def shared(w):  # the embedding table again as a bare parameter: vector-like there
            m = TinyLM(w, 1)
            m.extra = nn.Module()
            m.extra.table = m.emb.weight
            return m
        self.check(lambda: scaleinv.plan(shared(64), shared(16), shared(32)), "extra.table", "shares 'emb.weight'")


class Apply(unittest.TestCase):
    def test_init_rms_follows_the_shifted_table(self):
        table = scaleinv.table("mup")["roles"]
        torch.manual_seed(1)
        base = MLP(64)
        torch.manual_seed(2)
        model = MLP(1024)
        before = {n: rms(p) for n, p in model.named_parameters()}
        opt = scaleinv.apply(model, base, MLP(128), param="mup", optimizer="adamw", lr=1e-2)
        m = 16.0
        for name, role in (("fc1.weight", "embedding"), ("fc2.weight", "hidden"), ("head.weight", "readout")):
            row = table[role]
            want = rms(dict(base.named_parameters())[name]) * m ** -(row["b"] + row["a"])
            self.assertAlmostEqual(rms(dict(model.named_parameters())[name]) / want, 1.0, places=6, msg=name)
        lrs = {g["name"]: g["lr"] for g in opt.param_groups}
        for name, role in (("fc1.weight", "embedding"), ("fc2.weight", "hidden"), ("head.weight", "readout")):
            row = table[role]
            self.assertAlmostEqual(lrs[name], 1e-2 * m ** -(row["lr"]["adam"] + row["a"]), places=12, msg=name)
        self.assertIsInstance(opt, torch.optim.AdamW)
        self.assertGreater(before["head.weight"], rms(dict(model.named_parameters())["head.weight"]))

    def test_training_equals_the_table_with_multipliers(self):
        """seed 000 eq. 28: the shifted model (no multipliers) trains exactly as the table's own
        parameterization (forward multipliers m^-a, LR m^-c, eps m^-eps), for Adam and SGD."""
        torch.manual_seed(0)
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
        for param, optimizer, lr in (("mup", "adamw", 3e-3), ("mup", "sgd", 0.05), ("standard", "adamw", 1e-3)):
            table = scaleinv.table(param)["roles"]
            fam = "sgd" if optimizer == "sgd" else "adam"
            w, m = 256, 4.0
            torch.manual_seed(3)
            shifted = MLP(w)
            opt = scaleinv.apply(shifted, MLP(64), MLP(128), param=param, optimizer=optimizer, lr=lr,
                                 weight_decay=0.1 if optimizer == "adamw" else 0.0, eps=1e-4)
            roles = ("embedding", "hidden", "readout")
            a = [table[r]["a"] for r in roles]
            native = MLP(w, mult=tuple(m ** -ai for ai in a))
            with torch.no_grad():
                for (pn, pn2), ai in zip(zip(native.parameters(), shifted.parameters()), a):
                    pn.copy_(pn2 * m ** ai)  # the same effective weights
            groups = []
            for p, r in zip(native.parameters(), roles):
                row = table[r]
                g_lr = lr * m ** -row["lr"][fam]
                groups.append({"params": [p], "lr": g_lr, "eps": 1e-4 * m ** -row["eps"],
                               "weight_decay": lr * 0.1 * m ** -row["wd"] / g_lr})
            nopt = (torch.optim.SGD([{"params": g["params"], "lr": g["lr"]} for g in groups], lr=lr)
                    if optimizer == "sgd" else torch.optim.AdamW(groups, lr=lr))
            for _ in range(5):
                for model, o in ((shifted, opt), (native, nopt)):
                    o.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    o.step()
            out_s, out_n = shifted(x), native(x)
            err = float((out_s - out_n).abs().max() / out_n.abs().max())
            self.assertLess(err, 1e-5, f"{param} {optimizer}: relative difference {err}")

    def test_a_zero_init_tensor_stays_zero(self):
        torch.manual_seed(0)
        model = MLP(256)
        nn.init.zeros_(model.head.weight)
        base = MLP(64)
        nn.init.zeros_(base.head.weight)
        scaleinv.apply(model, base, MLP(128), param="mup")
        self.assertEqual(float(model.head.weight.abs().max()), 0.0)

    def test_depth_exponents_reach_every_in_block_factor(self):
        # Issue 38's mutation: with in_block planted false, a deep target's plan lost its k^-depth
        # terms and no test noticed. Each tensor's LR, weight-decay and eps factors must be the table's
        # m^-x k^-y, with y only inside the blocks: TinyLM(128, 8) from TinyLM(32, 2), m = 4, k = 4.
        t = scaleinv.table("depth-mup")
        p = scaleinv.plan(TinyLM(128, 8), TinyLM(32, 2), TinyLM(64, 2), param="depth-mup", optimizer="adamw",
                          weight_decay=0.1)
        self.assertAlmostEqual(p["k"], 4.0)
        rows = t["roles"]
        in_block = 0
        for ten in p["tensors"]:
            with self.subTest(tensor=ten["name"]):
                r = rows[ten["role"]]
                k = 4.0 if ten["in_block"] else 1.0
                in_block += ten["in_block"]
                self.assertAlmostEqual(ten["lr"], ten["m"] ** -r["lr"]["adam"] * k ** -r["depth_lr"]["adam"], places=12)
                self.assertAlmostEqual(ten["wd"], ten["m"] ** -r["wd"] * k ** -r["depth_wd"], places=12)
                self.assertAlmostEqual(ten["eps"], ten["m"] ** -r["eps"] * k ** -r["depth_eps"], places=12)
        self.assertEqual(in_block, 8 * 6)  # every block's norm (2), fc (2) and proj (2) tensors
        by = {x["name"]: x for x in p["tensors"]}
        self.assertAlmostEqual(by["blocks.5.fc.weight"]["lr"], 0.125)  # 4^-1 (width) x 4^-1/2 (depth)
        self.assertAlmostEqual(by["blocks.5.norm.weight"]["lr"], 0.5)  # 4^-1/2 (depth) alone

    def test_depth_mup_notes_the_branch_multiplier(self):
        p = scaleinv.plan(TinyLM(64, 8), TinyLM(32, 2), TinyLM(64, 2), param="depth-mup")
        self.assertAlmostEqual(p["k"], 4.0)
        self.assertAlmostEqual(p["branch_multiplier"], 4.0 ** -scaleinv.table("depth-mup")["depth"]["branch"])
        self.assertTrue(any("residual branch" in n for n in p["notes"]))


class TableAndTheory(unittest.TestCase):
    def test_same_data_as_the_cli(self):
        import json
        import os
        import subprocess
        import tempfile
        self.assertIn("mup", scaleinv.presets())
        t = scaleinv.theory("mup", optimizer="adam", depth=3)
        self.assertTrue(t["stable_init"])
        self.assertIn("feature", str(t).lower())
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            subprocess.run([os.environ["SCALEINV_BIN"], "theory", "--param", "mup", "--optimizer", "adam",
                            "--depth", "3", "--json", path], check=True, capture_output=True)
            with open(path) as f:
                self.assertEqual(json.load(f), dict(t))
        with self.assertRaises(scaleinv.UserError):
            scaleinv.theory("nope")

    def test_setups_venv_imports_the_checkout_without_pythonpath(self):
        """scripts/setup.sh writes a .pth into build/venv's site-packages (README's claim)."""
        import os
        import subprocess
        source = os.environ.get("SCALEINV_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
        py = os.path.join(source, "build", "venv", "bin", "python")
        if not os.path.exists(py):
            self.skipTest("no build/venv (scripts/setup.sh makes it)")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run([py, "-c", "import scaleinv, torch; print(scaleinv.table('mup')['name'], torch.__version__)"],
                           env=env, capture_output=True, text=True, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[0], "mup")


if __name__ == "__main__":
    unittest.main()
