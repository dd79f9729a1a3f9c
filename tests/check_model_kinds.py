"""Model kinds are data (src/models/model_kinds.h): no code outside src/models/ compares a model
kind's name. Run by CTest as Structure.NoModelKindComparisons; exits 1 listing each comparison
(file:line), 0 otherwise. The names are the rows of src/models/model_kinds.cpp (k.name = "...").

    /usr/bin/python3 tests/check_model_kinds.py [REPO_DIR]
"""
import os
import re
import sys


def kind_names(repo):
    with open(os.path.join(repo, "src", "models", "model_kinds.cpp")) as f:
        return re.findall(r'\bk\.name\s*=\s*"([a-z0-9_]+)"', f.read())


def comparisons(repo, names):
    alt = "|".join(map(re.escape, names))
    pattern = re.compile(r'(?:[!=]=\s*"(?:%s)")|(?:"(?:%s)"\s*[!=]=)' % (alt, alt))
    out = []
    src = os.path.join(repo, "src")
    for root, _, files in os.walk(src):
        if os.path.relpath(root, src).split(os.sep)[0] == "models":
            continue
        for name in sorted(files):
            if not name.endswith((".cpp", ".h")):
                continue
            path = os.path.join(root, name)
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    code = line.split("//", 1)[0]
                    if pattern.search(code):
                        out.append(f"{os.path.relpath(path, repo)}:{n}: {line.strip()}")
    return out


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    names = kind_names(repo)
    if len(names) < 5:
        print(f"src/models/model_kinds.cpp: found only {len(names)} rows ({names}); the pattern k.name = \"...\" changed?")
        return 1
    bad = comparisons(repo, names)
    for b in bad:
        print(b)
    print(f"{len(bad)} comparison(s) of a model kind's name outside src/models/ (ask model_kind(name) for a trait)"
          if bad else f"no model kind ({', '.join(names)}) is compared by name outside src/models/")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
