"""The Python twin of tests/test_bad_input.cpp (issue 38): every bad argument of the Python API is
one scaleinv.UserError line naming the argument and a fix, raised before anything is touched (the
user's model keeps its values, hooks and attributes), and no input can crash the interpreter."""
import math
import os
import subprocess
import sys
import tempfile
import unittest

import torch
from torch import nn
import torch.nn.functional as F

import scaleinv


class MLP(nn.Module):
    def __init__(self, width, d_in=8, classes=5):
        super().__init__()
        self.fc1 = nn.Linear(d_in, width, bias=False)
        self.fc2 = nn.Linear(width, width, bias=False)
        self.head = nn.Linear(width, classes, bias=False)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class PairOut(MLP):
    """Returns (logits, features): valid, the loss unpacks it."""

    def forward(self, x):
        h = torch.relu(self.fc2(torch.relu(self.fc1(x))))
        return self.head(h), h


class ComplexModel(MLP):
    def __init__(self, width):
        super().__init__(width)
        self.phase = nn.Parameter(torch.zeros(width, dtype=torch.complex64))


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class ApplyBadInput(unittest.TestCase):
    # (kwargs, what the message must name)
    CASES = [
        ({"lr": -1e-3}, "lr"), ({"lr": float("nan")}, "lr"), ({"lr": float("inf")}, "lr"), ({"lr": 0.0}, "lr"),
        ({"lr": "fast"}, "lr"), ({"lr": True}, "lr"),
        ({"weight_decay": -0.1}, "weight_decay"), ({"weight_decay": float("nan")}, "weight_decay"),
        ({"betas": (1.5, 0.999)}, "betas[0]"), ({"betas": (0.9, float("nan"))}, "betas[1]"), ({"betas": 0.9}, "betas"),
        ({"betas": (0.9, 0.99, 0.999)}, "betas"), ({"eps": -1e-8}, "eps"), ({"eps": float("inf")}, "eps"),
        ({"optimizer": "sgd", "momentum": -0.5}, "momentum"), ({"optimizer": "sgd", "momentum": 1.5}, "momentum"),
        ({"optimizer": "sgd", "lr": float("nan")}, "lr"), ({"optimizer": "adamw", "lr": float("inf")}, "lr"),
        ({"optimizer": "adam", "weight_decay": float("nan")}, "weight_decay"),
        ({"optimizer": "rmsprop"}, "optimizer"), ({"param": None}, "param"), ({"param": 3}, "param"),
        ({"param": "nosuch"}, "nosuch"),
        ({"overrides": ["head"]}, "overrides"), ({"overrides": {3: "readout"}}, "overrides"),
        ({"overrides": {"head": 7}}, "overrides"), ({"overrides": {"haed": "readout"}}, "haed"),
        ({"overrides": {"head(": "readout"}}, "head("), ({"overrides": {"head": "boss"}}, "boss"),
    ]

    def test_every_case_is_one_line_and_leaves_the_model_untouched(self):
        base, delta = MLP(16), MLP(32)
        for kwargs, named in self.CASES:
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                model = MLP(64)
                before = snapshot(model)
                with self.assertRaises(scaleinv.UserError) as cm:
                    scaleinv.apply(model, base, delta, **kwargs)
                msg = str(cm.exception)
                self.assertEqual(len(msg.splitlines()), 1, msg)
                self.assertIn(named, msg)
                self.assertIn("fix", msg)
                self.assertNotRegex(msg, r"--[a-zA-Z]")  # keyword arguments, not the CLI's flags (issue 63 class 10)
                self.assertTrue(same(before, snapshot(model)), "the model changed before the error")
                self.assertIsNone(getattr(model, "scaleinv_plan", None))
                self.assertFalse(model._forward_hooks)
                # A retry with good arguments then rescales exactly once.
                opt = scaleinv.apply(model, base, delta, lr=1e-3)
                self.assertIsNotNone(opt.scaleinv_plan)

    def test_models_that_are_not_modules_and_complex_tensors(self):
        for args, named in (((None, MLP(16), MLP(32)), "model"), ((MLP(64), "base", MLP(32)), "base"),
                            ((MLP(64), MLP(16), 3), "delta"), ((ComplexModel(64), ComplexModel(16), ComplexModel(32)), "phase")):
            with self.subTest(named=named):
                with self.assertRaises(scaleinv.UserError) as cm:
                    scaleinv.apply(*args)
                self.assertIn(named, str(cm.exception))
                self.assertEqual(len(str(cm.exception).splitlines()), 1)

    def test_a_pathological_regex_against_a_long_name_does_not_crash_the_interpreter(self):
        # std::regex recursed once per character and overflowed the stack here (a segfault of the
        # user's Python); RE2 matches in linear time. In a child process, so a crash fails the test
        # instead of ending the run.
        code = (
            "import torch, scaleinv\nfrom torch import nn\n"
            "def make(w):\n"
            "    m = nn.Module()\n"
            "    m.add_module('ab' * 50000, nn.Linear(w, w))\n"
            "    return m\n"
            "try:\n"
            "    scaleinv.plan(make(64), make(16), make(32), overrides={'^(a|b)*$': 'hidden'})\n"
            "    print('NO ERROR')\n"
            "except scaleinv.UserError as e:\n"
            "    print('USERERROR', str(e)[:60])\n"
            "p = scaleinv.plan(make(64), make(16), make(32), overrides={'^(a|b)*\\\\.weight$': 'hidden'})\n"
            "print('MATCHED', sum(t['why'].startswith('override') for t in p['tensors']))\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        lines = r.stdout.strip().splitlines()
        self.assertTrue(lines[0].startswith("USERERROR"), r.stdout)  # ^...$ over 'abab...ab.weight': no match
        self.assertEqual(lines[1], "MATCHED 1", r.stdout)


class CoordcheckBadInput(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.x, self.y = torch.randn(16, 8), torch.randint(0, 5, (16,))

    def check(self, named, **kwargs):
        args = {"make_model": MLP, "widths": [16, 32], "batches": [(self.x, self.y)], "steps": 1, "seeds": 2,
                "progress": False}
        args.update(kwargs)
        with self.assertRaises(scaleinv.UserError) as cm:
            scaleinv.coordcheck(**args)
        msg = str(cm.exception)
        self.assertEqual(len(msg.splitlines()), 1, msg)
        self.assertIn(named, msg)
        return msg

    def test_arguments(self):
        for kwargs, named in (({"widths": [0, 32]}, "widths"), ({"widths": [-16, 32]}, "widths"),
                              ({"widths": [16, 2 ** 40]}, "widths"), ({"widths": [16.5, 32]}, "widths"),
                              ({"widths": 16}, "widths"), ({"widths": [16]}, "widths"),
                              ({"base_width": -16}, "base_width"), ({"delta_width": 0}, "delta_width"),
                              ({"seeds": 1}, "seeds"), ({"seeds": [0, 0]}, "seeds"), ({"seeds": [0]}, "seeds"),
                              ({"seeds": "3"}, "seeds"), ({"steps": "two"}, "steps"), ({"steps": 0}, "steps"),
                              ({"param": None}, "param"), ({"lr": float("nan")}, "lr"),
                              ({"batches": []}, "batches"), ({"batches": [self.x]}, "batches[0]"),
                              ({"batches": [(self.x, self.y, self.y)]}, "batches[0]"),
                              ({"batches": [(self.x[:0], self.y[:0])]}, "batches[0]"),
                              ({"loss": "ce"}, "loss"), ({"quantities": ["h", "bogus"]}, "quantities")):
            with self.subTest(**{k: repr(v)[:40] for k, v in kwargs.items()}):
                self.check(named, **kwargs)

    def test_a_loss_that_is_not_a_scalar_tensor(self):
        self.check("loss", loss=lambda out, y: float(F.cross_entropy(out, y)))
        self.check("loss", loss=lambda out, y: F.cross_entropy(out, y, reduction="none"))

    def test_plot_at_an_existing_file_is_refused_before_any_run(self):
        with tempfile.NamedTemporaryFile() as f:
            calls = []

            def make(w):
                calls.append(w)
                return MLP(w)
            self.check("plot", make_model=make, plot=f.name)
            self.assertEqual(calls, [], "a model was built before the plot path was checked")

    def test_a_model_returning_a_tuple_is_checked(self):
        r = scaleinv.coordcheck(PairOut, widths=[32, 64, 128], batches=[(self.x, self.y)], steps=1, seeds=2,
                                loss=lambda out, y: F.cross_entropy(out[0], y), progress=False, quantities=["h"])
        self.assertTrue(any(row["module"] == "head" for row in r.rows), r.rows[:3])


class CoreBadInput(unittest.TestCase):
    def test_theory_arguments(self):
        for kwargs, named in (({"depth": 10 ** 12}, "depth"), ({"depth": 0}, "depth"), ({"depth": "3"}, "depth"),
                              ({"param": None}, "param"), ({"optimizer": 3}, "optimizer")):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                args = {"param": "mup"}
                args.update(kwargs)
                with self.assertRaises(scaleinv.UserError) as cm:
                    scaleinv.theory(**args)
                self.assertEqual(len(str(cm.exception).splitlines()), 1, str(cm.exception))
                self.assertIn(named, str(cm.exception))

    def test_an_unknown_table_is_named_as_the_keyword(self):
        # It read "command line: field '--param'" from apply, plan, coordcheck, theory and table.
        for call in (lambda: scaleinv.theory("nosuch"), lambda: scaleinv.table("nosuch"),
                     lambda: scaleinv.apply(MLP(64), MLP(16), MLP(32), param="nosuch", lr=1e-3),
                     lambda: scaleinv.coordcheck(MLP, widths=[16, 32], batches=[(torch.randn(4, 8), torch.zeros(4).long())],
                                                 param="nosuch", steps=1, seeds=2, progress=False)):
            with self.assertRaises(scaleinv.UserError) as cm:
                call()
            msg = str(cm.exception)
            self.assertIn("field 'param': unknown preset 'nosuch'", msg)
            self.assertNotIn("command line", msg)
            self.assertNotRegex(msg, r"--[a-zA-Z]")


if __name__ == "__main__":
    unittest.main()
