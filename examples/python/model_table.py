"""One command for docs/python.md's table of off-the-shelf models (issue 59): every model of
hf_models.py (transformers), vision_models.py (torchvision, timm) and torchtitan_models.py, each
family at its own default widths, through scaleinv.plan and scaleinv.coordcheck under mup (mup-moe
for the mixtures of experts) and standard, no overrides; progress as the family scripts print it,
then ONE markdown table (model, library and version, what it has, roles found, overrides, the mup
and standard verdicts, seconds). A model whose library is not importable here is reported as
skipped, not run.

    python examples/python/model_table.py [--threads N] [--families transformers,vision,torchtitan]
        [--write docs/python.md]

--write FILE replaces what lies between the lines <!-- model-table:begin --> and
<!-- model-table:end --> of FILE with the table and a paragraph saying how it was made (the command,
the date, the machine, its load, the seconds in all), atomically (a temporary file beside it, then
os.replace); only with every family. Exits 0 where every model run got the verdicts its family
expects (_model_check.expected), 1 otherwise; the table is written either way.
"""
import argparse
import datetime
import importlib.util
import os
import sys
import tempfile
import textwrap
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _model_check as mc  # noqa: E402

FAMILY_SCRIPTS = ("hf_models", "vision_models", "torchtitan_models")
BEGIN, END = "<!-- model-table:begin -->", "<!-- model-table:end -->"


def load_family(stem):
    """A family script (examples/python/STEM.py) as a module."""
    spec = importlib.util.spec_from_file_location(stem, os.path.join(HERE, stem + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def machine():
    """"AMD EPYC 7B13, 2 cores": the CPU's model name (/proc/cpuinfo) and the cores this process may use."""
    name = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name or 'an unknown CPU'}, {cores} cores"


def load():
    """The 1-minute load average, or None where the system does not give one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def run_family(family, threads, loads):
    """Every default model of a family at its default widths (3 seeds, 3 AdamW steps, lr 1e-3, batch
    seed 0): (results, skipped lines). Appends the load average before each model to `loads`."""
    widths = sorted(int(w) for w in family.DEFAULT_WIDTHS.split(","))
    names = [n for n in family.DEFAULT_MODELS.split(",") if n]
    why = {n: family.missing(n) for n in names}
    skipped = [f"{n} ({why[n]})" for n in names if why[n]]
    names = [n for n in names if not why[n]]
    for line in skipped:
        print(f"{family.FAMILY}: skipped {line}", flush=True)
    if not names:
        return [], skipped
    print(f"== {family.FAMILY}: {family.libraries(names)}, torch {torch.__version__.split('+')[0]}; widths {widths}, "
          f"3 seeds, 3 AdamW steps, lr 0.001, batch {family.BATCH_TEXT}, batch seed 0, {threads} threads", flush=True)
    results = []
    with family.settings(None):
        for n in names:
            loads.append(load())
            res = family.run_model(n, widths, 3, 3, 1e-3, 0)
            res["widths"] = widths
            results.append(res)
            mc.print_result(family, res)
    return results, skipped


def conditions(command, families, seconds, loads, threads):
    """The paragraph above the table, wrapped at 100 columns: the command, when and where it ran,
    under what load, the families' widths, the seconds in all."""
    seen = [x for x in loads if x is not None]
    load_text = (f"load average {min(seen):.1f} to {max(seen):.1f} before each model and at the end" if seen
                 else "load not known")
    widths = "; ".join(f"{f.FAMILY} {', '.join(f.DEFAULT_WIDTHS.split(','))}" for f in families)
    text = (f"Made by `{command}` on {datetime.date.today().isoformat()}: {machine()}, {threads} torch "
            f"thread(s), {load_text}; torch {torch.__version__.split('+')[0]}; {seconds:.0f} s in all. "
            f"Widths {widths}; 3 seeds, 3 AdamW steps, lr 1e-3, one batch (batch seed 0), no overrides. "
            "\"closest\" is the row nearest its tolerance in a pass, \"worst\" the row furthest past it in a "
            "failure (standard's: activations growing with width, no prediction, judged unstable).")
    return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)


def block(paragraph, results, skipped):
    """What goes between the markers: the paragraph, the table and a line per skipped model."""
    parts = [paragraph, "", mc.render_table(results)]
    if skipped:
        parts += ["", "Skipped (library not importable): " + "; ".join(skipped) + "."]
    return "\n".join(parts)


def replace_between_markers(text, body):
    """text with the lines strictly between its one BEGIN line and its one END line replaced by body;
    ValueError where the markers are missing, repeated or out of order."""
    lines = text.split("\n")
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(f"want one line {BEGIN} and, after it, one line {END}; found {len(begins)} and {len(ends)}")
    return "\n".join(lines[:begins[0] + 1] + body.split("\n") + lines[ends[0]:])


def write_between_markers(path, body):
    """Replace the marked block of the file at path by body: a temporary file in the same folder,
    then os.replace, so the file is the old one or the new one, never half of either."""
    with open(path, encoding="utf-8") as f:
        text = replace_between_markers(f.read(), body)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".model-table.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _families(arg):
    """The family modules asked for, in the table's order; exits naming the fix on an unknown one."""
    mods = [load_family(stem) for stem in FAMILY_SCRIPTS]
    if arg is None:
        return mods
    want = [w.strip() for w in arg.split(",") if w.strip()]
    known = {m.FAMILY: m for m in mods}
    for w in want:
        if w not in known:
            sys.exit(f"model_table.py: unknown family '{w}' (fix: some of {', '.join(known)})")
    return [m for m in mods if m.FAMILY in want]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    ap.add_argument("--families", default=None, help="some of transformers, vision, torchtitan (default: all)")
    ap.add_argument("--write", metavar="FILE", help="replace the table between the markers of FILE")
    a = ap.parse_args(argv)
    families = _families(a.families)
    if a.write and len(families) != len(FAMILY_SCRIPTS):
        sys.exit("model_table.py: --write with some families would drop the others' rows (fix: leave out --families)")
    if a.write:  # the markers are checked before the runs, not after them
        with open(a.write, encoding="utf-8") as f:
            replace_between_markers(f.read(), "")
    if a.threads:
        torch.set_num_threads(a.threads)
    results, skipped, loads, t0 = [], [], [], time.time()
    for fam in families:
        r, s = run_family(fam, torch.get_num_threads(), loads)
        results += [dict(x, family=fam) for x in r]
        skipped += [f"{fam.FAMILY}: {line}" for line in s]
    seconds = time.time() - t0
    loads.append(load())
    command = "python examples/python/model_table.py" + "".join(f" {x}" for x in (argv if argv is not None else sys.argv[1:]))
    text = block(conditions(command, families, seconds, loads, torch.get_num_threads()), results, skipped)
    print(f"\ntotal {seconds:.0f} s\n\n{text}")
    if a.write:
        write_between_markers(a.write, text)
        print(f"\nwritten between the markers of {a.write}")
    off = [r["name"] for r in results if not r["family"].expected(r)]
    print(f"\nverdict: {'as expected for every model run' if not off else 'NOT as expected: ' + ', '.join(off)}")
    return 0 if not off else 1


if __name__ == "__main__":
    sys.exit(main())
