"""Model kinds and optimizer kinds are data (src/brain/models/model_kinds.h, src/brain/optim/optimizer_kinds.h): no
code outside the folders holding the rows and their torch half (src/brain/<kind's folder>,
src/engine/<kind's folder>) compares a kind's name. Run by CTest as
Structure.NoModelKindComparisons; exits 1 listing each comparison (file:line), 0 otherwise.

Read: the C++ of src/ (but the rows' own folder) and python/module.cpp, and python/scaleinv/*.py.
Caught: a name compared directly (== "gpt", "sgd" != x, Python's in ("adam", "sgd")), and a name
compared through a constant holding it (const char* const kChain = "bigram"; ... == kChain, or
Python's NAMES = ("adam", "sgd"); ... in NAMES). The names are the rows of
src/brain/models/model_kinds.cpp (k.name = "...") and src/brain/optim/optimizer_kinds.cpp (k.kind = "...").

    /usr/bin/python3 tests/check_model_kinds.py [REPO_DIR]
"""
import os
import re
import sys

# (what, the rows' file, the row pattern, the folder of src/ that may compare them, the fix)
KINDS = (
    ("model kind", "src/brain/models/model_kinds.cpp", r'\bk\.name\s*=\s*"([a-z0-9_]+)"', "models",
     "ask model_kind(name) for a trait"),
    ("optimizer kind", "src/brain/optim/optimizer_kinds.cpp", r'\bk\.kind\s*=\s*"([a-z0-9_]+)"', "optim",
     "ask optimizer_kind(name) for a trait; Python reads _scaleinv.optimizer_kinds()"),
)


def row_names(repo, rows_file, pattern):
    with open(os.path.join(repo, rows_file)) as f:
        return re.findall(pattern, f.read())


def files(repo, own_folder):
    """(path, is_python) of every file read for a kind whose rows live in src/brain/<own_folder>/
    (its steps or modules in src/engine/<own_folder>/, which may compare too)."""
    src = os.path.join(repo, "src")
    for root, _, names in os.walk(src):
        parts = os.path.relpath(root, src).split(os.sep)
        if len(parts) >= 2 and parts[0] in ("brain", "engine") and parts[1] == own_folder:
            continue
        for name in sorted(names):
            if name.endswith((".cpp", ".h")):
                yield os.path.join(root, name), False
    yield os.path.join(repo, "python", "module.cpp"), False
    pkg = os.path.join(repo, "python", "scaleinv")
    if os.path.isdir(pkg):
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                yield os.path.join(pkg, name), True


def patterns(names):
    lit = r"""["'](?:%s)["']""" % "|".join(map(re.escape, names))
    direct = re.compile(r"(?:[!=]=\s*%s)|(?:%s\s*[!=]=)" % (lit, lit))
    # Python: x in ("adam", ...) / not in [...] / {...}
    member = re.compile(r"\bin\s*[\(\[\{][^\)\]\}]*%s" % lit)
    # a constant holding a name (or a tuple/list of names): C++ const char* / std::string / constexpr, Python NAME = ...
    const = re.compile(r"""(?:\b(?:const|constexpr)\b[^=;()]*?\b([A-Za-z_]\w*)\s*=\s*%s\s*;)"""
                       r"""|(?:^([A-Za-z_]\w*)\s*=\s*[\(\[\{]?\s*%s)""" % (lit, lit))
    return direct, member, const


def strip_comment(line, is_python):
    return line.split("#", 1)[0] if is_python else line.split("//", 1)[0]


def comparisons(repo, names, own_folder):
    direct, member, const = patterns(names)
    out = []
    for path, is_python in files(repo, own_folder):
        if not os.path.exists(path):
            continue
        with open(path, errors="replace") as f:
            lines = [strip_comment(line, is_python) for line in f]
        consts = set()
        for code in lines:
            for m in const.finditer(code):
                consts.add(m.group(1) or m.group(2))
        through = None
        if consts:
            alt = "|".join(map(re.escape, sorted(consts)))
            through = re.compile(r"(?:[!=]=\s*(?:%s)\b)|(?:\b(?:%s)\s*[!=]=)|(?:\bin\s+(?:%s)\b)" % (alt, alt, alt))
        rel = os.path.relpath(path, repo)
        for n, code in enumerate(lines, 1):
            if direct.search(code) or (is_python and member.search(code)) or (through and through.search(code)):
                out.append(f"{rel}:{n}: {code.strip()}")
    return out


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    failed = False
    for what, rows_file, pattern, own, fix in KINDS:
        names = row_names(repo, rows_file, pattern)
        if len(names) < 5:
            print(f"{rows_file}: found only {len(names)} rows ({names}); the row pattern {pattern} changed?")
            failed = True
            continue
        bad = comparisons(repo, names, own)
        for b in bad:
            print(b)
        print(f"{len(bad)} comparison(s) of {'an' if what[0] in 'aeiou' else 'a'} {what}'s name outside src/{{brain,engine}}/{own}/ ({fix})" if bad
              else f"no {what} ({', '.join(names)}) is compared by name outside src/{{brain,engine}}/{own}/")
        failed = failed or bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
