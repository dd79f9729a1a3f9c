"""What the off-the-shelf model scripts share (issue 59): hf_models.py, vision_models.py and
torchtitan_models.py keep their model builders and their own specifics; this file runs a model
through scaleinv.plan and scaleinv.coordcheck under a muP-like table and standard, reads the
verdicts, prints them, and renders the one markdown table model_table.py writes into
docs/python.md. Not a script: imported by the three family scripts and by model_table.py.

A family script is a module with (besides its builders):
    FAMILY           the family's name in the table and in progress lines ("transformers")
    DEFAULT_WIDTHS   its widths, "128,256,512"
    DEFAULT_MODELS   its models, comma-separated
    BATCH_TEXT       what one batch is, for the header ("8 x 16")
    ALL_EXPECTED     the verdict line's text when every model is as expected
    TOLERANCE        whether its progress lines show the deciding row's tolerance
    missing(name)    None, or why the model's library is not importable here
    libraries(names) "transformers 5.24.0" for the header
    settings(args)   a context manager around its runs (denormals, warnings); args: its parsed
                     options, or None (model_table.py: the defaults)
    run_model(name, widths, seeds, steps, lr, batch_seed)  a result (check_model's)
    head_line(res)   the progress line naming the model and its roles
    note_shown(note) whether a plan note is printed
    expected(res)    whether the verdicts are the ones the family expects (most take expected below)
"""
import argparse
import contextlib
import sys
import time

import torch

import scaleinv

D_HEAD = 16  # every transformer here keeps d_head fixed and grows its heads with width
# The language models' grid (transformers and torchtitan): vocabulary, positions, batch rows.
VOCAB, SEQ, BATCH = 128, 16, 8
# The coordinate check's quantities without the spectral norms, for a model whose norms are not
# yet measured right (the family scripts say which and why).
NO_SPECTRAL = ("h", "dh", "h'", "W'", "dW")


def token_batch(seed=0):
    """A language model's probe: (x, y), each [BATCH, SEQ] random tokens below VOCAB, from seed."""
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return x, y


def roles_found(plan):
    """{role: number of tensors} of a plan."""
    counts = {}
    for t in plan["tensors"]:
        counts[t["role"]] = counts.get(t["role"], 0) + 1
    return counts


def roles_text(roles):
    """"embedding 1, hidden 8, vector 18": the roles in name order."""
    return ", ".join(f"{k} {v}" for k, v in sorted(roles.items()))


def deciding_row(result):
    """The row that decides a CoordCheckResult's verdict: the worst failure (the largest excess past
    its tolerance, or an unstable activation) or, for a pass, the row closest to its tolerance; None
    where no row is judged."""
    worst, worst_score = None, None
    for r in result.rows:
        if r["zero"] or r["measured"] is None:
            continue
        if r["predicted"] is not None and r["tolerance"]:
            score = abs(r["measured"] - r["predicted"]) / r["tolerance"]
        elif r["stable"] is False:
            score = 1.0 + abs(r["measured"])
        else:
            continue
        if worst_score is None or score > worst_score:
            worst, worst_score = r, score
    return worst


def describe_row(row, tolerance=False):
    """"dh lm_head step 1: -0.28 vs +0.00" (with " (tolerance 0.27)" where asked and predicted), or
    "-" for no row."""
    if row is None:
        return "-"
    pred = "-" if row["predicted"] is None else f"{row['predicted']:+.2f}"
    tol = f" (tolerance {row['tolerance']:.2f})" if tolerance and row["predicted"] is not None and row["tolerance"] else ""
    return f"{row['quantity']} {row['module']} step {row['step']}: {row['measured']:+.2f} vs {pred}{tol}"


def count(n):
    """"1 failure", "3 failures"."""
    return f"{n} failure" if n == 1 else f"{n} failures"


def _verdict(make, widths, batch, param, loss, quantities, seeds, steps, lr):
    """One coordinate check (AdamW, no overrides) summarised: passed, failures, rows, the deciding row,
    seconds, the failure lines."""
    t0 = time.time()
    r = scaleinv.coordcheck(make, widths, [batch], param=param, optimizer="adamw", lr=lr, steps=steps, seeds=seeds,
                            loss=loss, progress=False, quantities=quantities)
    return {"param": param, "passed": r.passed, "failures": len(r.failures), "rows": len(r.rows),
            "row": deciding_row(r), "seconds": time.time() - t0, "lines": r.failures}


def check_model(make, widths, batch, param="mup", loss=None, quantities=None, seeds=3, steps=3, lr=1e-3):
    """The plan of make(widths[-1]) against widths[0] and widths[1] (roles, notes, ties, module
    scales) and the coordinate checks under `param` ("mup" key) and standard ("standard" key), each
    a _verdict dict. The caller adds name, class, library, version and what the row shows."""
    torch.manual_seed(0)
    plan = scaleinv.plan(make(widths[-1]), make(widths[0]), make(widths[1]), param=param)
    out = {"param": param, "quantities": quantities, "roles": roles_found(plan), "notes": plan["notes"],
           "ties": plan["ties"], "module_scales": plan["module_scales"], "plan": plan}
    out["mup"] = _verdict(make, widths, batch, param, loss, quantities, seeds, steps, lr)
    out["standard"] = _verdict(make, widths, batch, "standard", loss, quantities, seeds, steps, lr)
    return out


def cannot_pass(res):
    """True where the plan says in a note that the check fails there (a d_head growing under 1/d_head
    logits, a readout-like layer whose output a norm reads)."""
    return any("the check fails there" in n for n in res["notes"])


def expected(res):
    """The verdicts a model should get: a model its plan says cannot pass fails under mup; any other
    passes under mup (mup-moe) and fails under standard."""
    if cannot_pass(res):
        return not res["mup"]["passed"]
    return res["mup"]["passed"] and not res["standard"]["passed"]


@contextlib.contextmanager
def flushed_denormals():
    """Denormal floats flushed to zero inside (GPT-2's backward under standard runs into them: ~10x
    slower on the CPU; verdicts unchanged), as they were afterwards."""
    on = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if on:
            torch.set_flush_denormal(False)


def print_result(family, res):
    """A model's progress lines: the family's head line, the notes it shows, then per table its
    verdict, rows, failures, seconds and deciding row, and mup's first four failure lines."""
    print(family.head_line(res), flush=True)
    for note in res["notes"]:
        if family.note_shown(note):
            print(f"  note: {note}")
    for p in ("mup", "standard"):
        v = res[p]
        print(f"  {p:9s} {'PASS' if v['passed'] else 'FAIL'}: {v['rows']} rows, {v['failures']} failures, "
              f"{v['seconds']:.1f} s; deciding row {describe_row(v['row'], family.TOLERANCE)}", flush=True)
        if p == "mup":
            for line in v["lines"][:4]:
                print(f"      {line[:200]}")


# The one table's columns (docs/python.md, "Models off the shelf: one table").
COLUMNS = ("model", "library", "what it has", "roles found", "overrides", "mup (mup-moe)", "standard",
           "seconds (mup + standard)")


def verdict_cell(v, quantities=None, judged="closest"):
    """"PASS: 0 failures; closest ..." or, under another table than mup or with quantities left out,
    "PASS (mup-moe; h, dh, ...): ..."; the deciding row with its tolerance."""
    tags = [v["param"]] if v["param"] not in ("mup", "standard") else []
    if quantities:
        tags.append(", ".join(quantities))
    tag = f" ({'; '.join(tags)})" if tags else ""
    word = judged if v["passed"] else "worst"
    return f"{'PASS' if v['passed'] else 'FAIL'}{tag}: {count(v['failures'])}; {word} {describe_row(v['row'], True)}"


def table_row(res):
    """One markdown row of the one table for a result (check_model's, with name, class, library,
    version, what)."""
    m, s = res["mup"], res["standard"]
    cells = [f"`{res['class']}` {res['name']}", f"{res['library']} {res['version']}", res["what"],
             roles_text(res["roles"]), "none", verdict_cell(m, res["quantities"]), verdict_cell(s, res["quantities"]),
             f"{m['seconds']:.0f} + {s['seconds']:.0f}"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def render_table(results):
    """The one markdown table (header, rule, one row per result), lines without a final newline."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + [table_row(r) for r in results])


def _parser(family, doc):
    """The family script's options: widths, seeds, steps, lr, batch seed, models, threads."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--widths", default=family.DEFAULT_WIDTHS)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-seed", type=int, default=0)
    ap.add_argument("--models", default=family.DEFAULT_MODELS)
    ap.add_argument("--threads", type=int, default=0)
    return ap


def _names(family, script, models):
    """The models asked for, each known and its library importable; else the script exits naming
    the fix."""
    names = [n.strip() for n in models.split(",") if n.strip()]
    for n in names:
        if n not in family.MODELS:
            sys.exit(f"{script}: unknown model '{n}' (fix: some of {', '.join(family.MODELS)})")
        why = family.missing(n)
        if why:
            sys.exit(f"{script}: {n}: {why}")
    return names


def family_main(family, script, doc, argv=None, add_args=None):
    """A family script's command: its models at its widths, one progress block per model, the total
    time, its rows of the one table and the verdict line; 0 where every model is as expected."""
    ap = _parser(family, doc)
    if add_args:
        add_args(ap)
    a = ap.parse_args(argv)
    names = _names(family, script, a.models)
    if a.threads:
        torch.set_num_threads(a.threads)
    widths = sorted(int(w) for w in a.widths.split(","))
    print(f"{family.libraries(names)}, torch {torch.__version__.split('+')[0]}; widths {widths}, {a.seeds} seeds, "
          f"{a.steps} AdamW steps, lr {a.lr:g}, batch {family.BATCH_TEXT}, batch seed {a.batch_seed}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results, t_all = [], time.time()
    with family.settings(a):
        for n in names:
            res = family.run_model(n, widths, a.seeds, a.steps, a.lr, a.batch_seed)
            results.append(res)
            print_result(family, res)
    print(f"\ntotal {time.time() - t_all:.0f} s\n")
    print(render_table(results))
    off = [r["name"] for r in results if not family.expected(r)]
    print(f"\nverdict: {family.ALL_EXPECTED if not off else 'NOT as expected: ' + ', '.join(off)}")
    return 0 if not off else 1
