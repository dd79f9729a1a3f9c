"""The include stack (docs/design.md, "Layering"): src/ is two halves and the CLI, src/brain/<name>
(torch-free), src/engine/<name> (torch) and src/cli. Every `#include "half/folder/..."` in src/
must name a folder below the including file's own (every brain folder is below every engine
folder), and (the floors) one that docs/design.md's folder tables list in that folder's "includes"
column; a folder the tables list that no file includes is stale and fails too, so the tables and
the code cannot drift apart. No file of src/brain may include a libtorch header (<torch/...>,
<ATen/...>, <c10/...>). docs/layout.md's folder list must name every folder of src/ (as
`src/<half>/<name>`) and every folder the repository tracks at its top (as `<name>/`), and no
folder that is not there. Run by CTest as
Structure.IncludesFollowTheStack; exits 1 listing each problem (file:line, the two folders), 0
otherwise. No exceptions.

    /usr/bin/python3 tests/check_stack.py [SRC_DIR]
"""
import fnmatch
import os
import re
import sys

# Rank = height in the stack; a folder may include folders of lower rank only. Folders of equal
# rank are siblings and include neither each other. Every folder of src/brain (the torch-free half)
# ranks below every folder of src/engine (the torch half), so no brain file can include the engine;
# and no brain file may include a libtorch header itself (BRAIN_TORCH below).
STACK = [
    ["brain/util"],                                  # errors, atomic files, TOML, SQLite, progress, gnuplot
    ["brain/param", "brain/data", "brain/models"],   # the table; a run's data and model config, the kinds' rows
    ["brain/theory", "brain/optim"],                 # exponents and predictions; optimizer rows and config
    ["brain/train"],                                 # a run's whole config
    ["brain/coordcheck", "brain/sweep"],             # fits and verdicts; spaces, draws, the store
    ["brain/adapt", "brain/report"],                 # own-model plans; transfer, predict
    ["engine/runtime", "engine/param", "engine/unit", "engine/precision"],  # torch utilities and ops
    ["engine/data", "engine/dist"],
    ["engine/models"],
    ["engine/optim"],
    ["engine/train"],
    ["engine/coordcheck", "engine/sweep"],
    ["engine/diagnostics", "engine/opcheck", "engine/adapt"],
    ["engine/perf"],
    ["cli"],
]
RANK = {folder: r for r, folders in enumerate(STACK) for folder in folders}
HALVES = ("brain", "engine")
BASE = "brain/util"  # every folder may include it; the folder table's column does not list it
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:brain|engine)/[A-Za-z0-9_]+|cli)/')
BRAIN_TORCH = re.compile(r'^\s*#\s*include\s*<(torch|ATen|c10)/')


def folders_of(src):
    """The folders holding sources: src/<half>/<name> for each half, and src/cli (or any other
    top-level folder, which the stack then refuses)."""
    out = []
    for top in sorted(os.listdir(src)):
        path = os.path.join(src, top)
        if not os.path.isdir(path):
            continue
        if top in HALVES:
            out += [f"{top}/{d}" for d in sorted(os.listdir(path)) if os.path.isdir(os.path.join(path, d))]
            loose = [f for f in sorted(os.listdir(path)) if os.path.isfile(os.path.join(path, f))]
            out += [f"{top}/{f}" for f in loose]  # a file outside a folder: refused below
        else:
            out.append(top)
    return out


TABLE_ROW = re.compile(r"^\|\s*`([a-z_/]+)`\s*\|.*\|\s*([^|]*?)\s*\|\s*$")


def declared_includes(design_md):
    """docs/design.md's folder tables (one per half, and cli): folder -> the set of folders it may
    include besides brain/util and itself (None for cli: "everything it drives")."""
    out = {}
    in_table = False
    with open(design_md) as f:
        for line in f:
            if line.startswith("| folder | holds | includes"):
                in_table = True
                continue
            if in_table and not line.startswith("|"):
                in_table = False
                continue
            m = TABLE_ROW.match(line) if in_table else None
            if m:
                cell = m.group(2)
                out[m.group(1)] = None if "everything" in cell else set(re.findall(r"`([a-z_/]+)`", cell)) - {BASE}
    return out


def violations(src, design_md=None):
    out = []
    declared = declared_includes(design_md) if design_md and os.path.exists(design_md) else None
    used = {}
    for folder in folders_of(src):
        path = os.path.join(src, folder)
        if folder not in RANK:
            out.append(f"{folder}: a folder the stack does not place (fix: put it under src/brain/ (torch-free) or "
                       "src/engine/ (torch), and add it to STACK in tests/check_stack.py and to docs/design.md)")
            continue
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), errors="replace") as f:
                for n, line in enumerate(f, 1):
                    if folder.startswith("brain/") and BRAIN_TORCH.match(line):
                        out.append(f"{folder}/{name}:{n}: the brain includes libtorch ({line.strip()}) (fix: move "
                                   "the file to src/engine/, or the torch part of it)")
                    m = INCLUDE.match(line)
                    if not m or m.group(1) == folder:
                        continue
                    dep = m.group(1)
                    if dep not in RANK:
                        out.append(f"{folder}/{name}:{n}: includes {dep}/, a folder the stack does not place")
                    elif RANK[dep] >= RANK[folder]:
                        out.append(f"{folder}/{name}:{n}: {folder} includes {dep} ({line.strip()}), which is not "
                                   "below it")
                    elif declared is not None and dep != BASE:
                        used.setdefault(folder, set()).add(dep)
                        allowed = declared.get(folder, set())
                        if allowed is not None and dep not in allowed:
                            out.append(f"{folder}/{name}:{n}: {folder} includes {dep}, which docs/design.md's folder "
                                       f"table does not list for {folder} (fix: the code or the table)")
    if declared is not None:
        for folder, allowed in sorted(declared.items()):
            if folder in RANK and allowed is not None:
                for dep in sorted(allowed - used.get(folder, set())):
                    out.append(f"docs/design.md: the folder table lists {dep} for {folder}, which no file of "
                               f"src/{folder}/ includes (fix: drop it from the table)")
        for folder in sorted(set(RANK) - set(declared)):
            if os.path.isdir(os.path.join(src, folder)):
                out.append(f"docs/design.md: the folder table has no row for {folder}/")
    return out


LAYOUT_ROW = re.compile(r"^(src/[a-z_/]+|\.?[a-z_]+/)\s")


def layout_violations(src, layout_md):
    """docs/layout.md's code block against the tree: the folders of src/ and the top-level folders
    (those holding tracked files: any but build outputs, which .gitignore lists, and hidden ones
    other than .ci)."""
    if not os.path.exists(layout_md):
        return [f"{layout_md}: missing"]
    named = set()
    with open(layout_md) as f:
        for line in f:
            m = LAYOUT_ROW.match(line)
            if m:
                named.add(m.group(1).rstrip("/"))
    root = os.path.dirname(os.path.abspath(src))
    ignored = set()
    gitignore = os.path.join(root, ".gitignore")
    if os.path.exists(gitignore):
        with open(gitignore) as f:
            ignored = {ln.strip().strip("/") for ln in f if ln.strip() and not ln.startswith("#")}
    there = {f"src/{d}" for d in folders_of(src) if os.path.isdir(os.path.join(src, d))}
    there |= {f"src/{h}" for h in HALVES if os.path.isdir(os.path.join(src, h))}
    there |= {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and d != "src"
              and not any(fnmatch.fnmatch(d, pat) for pat in ignored) and (not d.startswith(".") or d == ".ci")}
    out = [f"docs/layout.md: {d}/ is in the tree but not in the folder list (fix: add a line for it)"
           for d in sorted(there - named)]
    out += [f"docs/layout.md: lists {d}/, which is not in the tree (fix: drop or rename the line)"
            for d in sorted(named - there)]
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    bad = violations(src, os.path.join(src, "..", "docs", "design.md"))
    bad += layout_violations(src, os.path.join(src, "..", "docs", "layout.md"))
    for v in bad:
        print(v)
    print(f"{len(bad)} include(s) off the stack or the table" if bad else
          "every include follows the stack and docs/design.md's folder table")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
