"""The usual torch 2.x training loop around scaleinv.apply's optimizer: bf16 autocast on the CPU,
clip_grad_norm_ over all groups, torch.optim's other optimizers from apply's groups, schedulers.
Each check compares against the same loop with the table's multipliers written into the model by
hand (seed 000 eq. 28: the shift leaves training unchanged), or against the group ratios apply set."""
import unittest

import torch

import scaleinv
from test_real_modules import TiedGPT, lm_loss, tokens

HAS_BF16_AUTOCAST = hasattr(torch, "autocast") and hasattr(torch, "bfloat16")


def applied(optimizer="adamw", seed=0, **kw):
    torch.manual_seed(seed)
    model = TiedGPT(64)
    opt = scaleinv.apply(model, base=TiedGPT(16), delta=TiedGPT(32), param="mup", optimizer=optimizer, **kw)
    return model, opt


def lr_ratios(opt):
    lr0 = opt.param_groups[0]["lr"]
    return [g["lr"] / lr0 for g in opt.param_groups]


class Loop(unittest.TestCase):
    @unittest.skipUnless(HAS_BF16_AUTOCAST, f"torch {torch.__version__} has no CPU autocast")
    def test_bf16_autocast_trains_near_float32_and_keeps_the_groups(self):
        x, y = tokens(n=8, seed=1)
        runs = {}
        for amp in (False, True):
            model, opt = applied(lr=1e-2, weight_decay=0.1)
            ratios = lr_ratios(opt)
            losses = []
            for _ in range(20):
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    out = model(x)
                    if amp:
                        self.assertEqual(out.dtype, torch.bfloat16, "the readout ran in bf16, hook included")
                    loss = lm_loss(out.float(), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            self.assertEqual(lr_ratios(opt), ratios)
            self.assertTrue(all(p.dtype == torch.float32 for p in model.parameters()), "master weights stay fp32")
            runs[amp] = losses
        # bf16 keeps 8 bits of mantissa: ~0.4% per rounding; the losses track fp32 to a few percent.
        for a, b in zip(runs[False], runs[True]):
            self.assertLess(abs(a - b) / a, 0.05, (runs[False], runs[True]))
        self.assertLess(runs[True][-1], 0.6 * runs[True][0])

    def test_clip_grad_norm_over_the_groups_scales_every_gradient_alike(self):
        x, y = tokens(n=8, seed=1)
        model, opt = applied(lr=1e-2)
        lm_loss(model(x), y).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        params = [p for g in opt.param_groups for p in g["params"]]
        total = float(torch.nn.utils.clip_grad_norm_(params, max_norm=0.1))
        self.assertGreater(total, 0.1, "the test clips")
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, grads[n] * (0.1 / (total + 1e-6)), rtol=1e-5, atol=0)
        ratios = lr_ratios(opt)
        opt.step()
        self.assertEqual(lr_ratios(opt), ratios)

    def test_sgd_and_adam_from_apply_train_and_keep_their_ratios(self):
        x, y = tokens(n=8, seed=1)
        for name, cls, kw in (("sgd", torch.optim.SGD, {"lr": 0.5, "momentum": 0.9}),
                              ("adam", torch.optim.Adam, {"lr": 1e-2})):
            model, opt = applied(name, **kw)
            self.assertIs(type(opt), cls)
            plan = {t["name"]: t["lr"] for t in opt.scaleinv_plan["tensors"]}
            for g in opt.param_groups:
                self.assertAlmostEqual(g["lr"], kw["lr"] * plan[g["name"]], places=12)
            first = None
            for _ in range(10):
                opt.zero_grad()
                loss = lm_loss(model(x), y)
                loss.backward()
                opt.step()
                first = first if first is not None else loss.item()
            self.assertLess(loss.item(), first, name)

    def test_groups_rebuilt_into_another_torch_optimizer_keep_their_lrs(self):
        model, opt = applied(lr=1e-2)
        groups = [{k: v for k, v in g.items() if k not in ("betas", "eps", "amsgrad", "foreach", "maximize",
                                                                "capturable", "differentiable", "fused",
                                                                "decoupled_weight_decay")}
                  for g in opt.param_groups]
        nadam = torch.optim.NAdam(groups) if hasattr(torch.optim, "NAdam") else torch.optim.Adam(groups)
        self.assertEqual(lr_ratios(nadam), lr_ratios(opt))

    def test_adafactor_is_refused_naming_why(self):
        with self.assertRaises(scaleinv.UserError) as e:
            applied("adafactor")
        self.assertIn("optimizer", str(e.exception))
        self.assertIn("fix:", str(e.exception))

    def test_schedulers_that_keep_the_ratios_pass_and_flatteners_are_caught(self):
        model, opt = applied(lr=1e-2)
        sched = torch.optim.lr_scheduler.SequentialLR(
            opt, [torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10),
                  torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=90)], milestones=[10])
        self.assertIsNone(scaleinv.check_schedule(sched, steps=100))
        model, opt = applied(lr=1e-2)
        flat = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=50, eta_min=1e-4)
        with self.assertRaises(scaleinv.UserError):
            scaleinv.check_schedule(flat, steps=100)

    def test_check_schedule_refuses_what_would_check_nothing_and_stops_at_the_schedulers_end(self):
        model, opt = applied(lr=1e-2)
        flat = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=100)  # one max_lr: flattens
        for bad, words in (({"steps": -5}, "steps"), ({"steps": 0}, "steps"), ({"rtol": float("nan")}, "rtol"),
                           ({"rtol": -1.0}, "rtol")):
            with self.assertRaises(scaleinv.UserError) as e:
                scaleinv.check_schedule(flat, **bad)
            self.assertIn(words, str(e.exception))
        with self.assertRaises(scaleinv.UserError):
            scaleinv.check_schedule(flat)
        model, opt = applied(lr=1e-2)
        per_group = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in opt.param_groups],
                                                        total_steps=100)
        self.assertIsNone(scaleinv.check_schedule(per_group))  # the default stops at total_steps
        self.assertIsNone(scaleinv.check_schedule(per_group, steps=500))  # and so does a longer check
        model, opt = applied(lr=1e-2)
        with self.assertRaises(scaleinv.UserError) as e:
            scaleinv.check_schedule(scaleinv.lr_schedule(opt, lambda k: float("nan")))
        self.assertIn("finite", str(e.exception))

    @unittest.skipUnless(hasattr(torch.optim.Optimizer, "register_step_pre_hook"),
                         f"torch {torch.__version__} has no optimizer step hooks (check_schedule is the check there)")
    def test_training_under_a_flattening_schedule_warns_once_and_a_safe_one_is_silent(self):
        import warnings
        x, y = tokens(n=4, seed=2)
        S = torch.optim.lr_scheduler
        cases = [("CosineAnnealingLR(eta_min=1e-3)", lambda o: S.CosineAnnealingLR(o, T_max=50, eta_min=1e-3), True),
                 ("OneCycleLR(max_lr=1e-2)", lambda o: S.OneCycleLR(o, max_lr=1e-2, total_steps=50), True),
                 ("every group set to one LR", None, True),
                 ("CosineAnnealingLR(eta_min=0)", lambda o: S.CosineAnnealingLR(o, T_max=50), False),
                 ("lr_schedule warmup", lambda o: scaleinv.lr_schedule(o, lambda k: min(1.0, (k + 1) / 10)), False),
                 ("per-group OneCycleLR",
                  lambda o: S.OneCycleLR(o, max_lr=[g["lr"] for g in o.param_groups], total_steps=50), False)]
        for name, make, flattens in cases:
            with self.subTest(schedule=name):
                model, opt = applied(lr=1e-2)
                sched = make(opt) if make else None
                with warnings.catch_warnings(record=True) as got:
                    warnings.simplefilter("always")
                    for step in range(20):
                        if sched is None and step == 3:
                            for g in opt.param_groups:
                                g["lr"] = 1e-3
                        loss = lm_loss(model(x), y)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                        if sched is not None:
                            sched.step()
                mine = [str(w.message) for w in got if "per-tensor LR ratios" in str(w.message)]
                self.assertEqual(len(mine), 1 if flattens else 0, mine)
                if flattens:
                    self.assertIn("fix: scaleinv.lr_schedule", mine[0])
                    self.assertIn("optimizer step", mine[0])

    def test_a_torch_older_than_the_claim_is_refused_and_nothing_changes(self):
        from scaleinv import _apply
        torch.manual_seed(0)
        model = TiedGPT(64)
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        real = torch.__version__
        try:
            torch.__version__ = "1.12.1"
            with self.assertRaises(scaleinv.UserError) as e:
                scaleinv.apply(model, base=TiedGPT(16), delta=TiedGPT(32), param="mup")
        finally:
            torch.__version__ = real
        self.assertIn("1.12.1 is older than 1.13", str(e.exception))
        self.assertEqual(_apply.MIN_TORCH, (1, 13))
        for k, v in model.named_parameters():
            self.assertTrue(torch.equal(v, before[k]), k)
        self.assertFalse(hasattr(model, "scaleinv_plan"))


if __name__ == "__main__":
    unittest.main()
