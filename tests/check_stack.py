"""The include stack (docs/design.md, "Layering"): every `#include "folder/..."` in src/ must name
a folder below the including file's own. Run by CTest as Structure.IncludesFollowTheStack; exits 1
listing each include that runs back up (file:line, the two folders), 0 otherwise. No exceptions.

    /usr/bin/python3 tests/check_stack.py [SRC_DIR]
"""
import os
import re
import sys

# Rank = height in the stack; a folder may include folders of lower rank only. Folders of equal
# rank are siblings and include neither each other.
STACK = [
    ["core"],                                 # errors, atomic files, TOML, SQLite, progress, gnuplot
    ["param", "data", "dist"],                # the table; data sources; c10d data-parallel
    ["theory", "unit", "precision"],          # theory (param); unit-scaled ops, low-precision rounding
    ["models"],
    ["optim"],
    ["train"],
    ["measure", "sweep"],
    ["adapt", "report"],
    ["perf"],
    ["cli"],
]
RANK = {folder: r for r, folders in enumerate(STACK) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/')


def violations(src):
    out = []
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder)
        if not os.path.isdir(path):
            continue
        if folder not in RANK:
            out.append(f"{folder}/: a folder the stack does not place (fix: add it to STACK in tests/check_stack.py "
                       "and to docs/design.md)")
            continue
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) == folder:
                        continue
                    dep = m.group(1)
                    if dep not in RANK:
                        out.append(f"{folder}/{name}:{n}: includes {dep}/, a folder the stack does not place")
                    elif RANK[dep] >= RANK[folder]:
                        out.append(f"{folder}/{name}:{n}: {folder} includes {dep} ({line.strip()}), which is not "
                                   "below it")
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    bad = violations(src)
    for v in bad:
        print(v)
    print(f"{len(bad)} include(s) running back up the stack" if bad else "every include follows the stack")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
