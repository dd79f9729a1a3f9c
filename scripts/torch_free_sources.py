#!/usr/bin/env python3
"""Which of the given C++ sources compile without libtorch: their #include closure (quoted includes
resolved against src/ and tests/, followed transitively) has no <torch/...>, <ATen/...> or
<c10/...> include. CMakeLists.txt runs this at configure time and builds those sources apart, in
unity batches of their own without the torch precompiled header: loading it costs a torch-free file more than it saves (issue 62:
src/cli/cmd_predict.cpp took 62 s with it against 34 s without, on 2 loaded cores; a file that
includes torch gains about 13%).

    python3 scripts/torch_free_sources.py SOURCE_DIR FILE...

Prints the torch-free FILEs, one per line, as given. A quoted include that resolves nowhere is
treated as torch-free (system and third-party headers come in angle brackets)."""
import os
import re
import sys

QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
TORCH = re.compile(r'^\s*#\s*include\s+<(torch|ATen|c10)/', re.M)


def includes_torch(path, roots, memo):
    """True where path or anything it includes (transitively) includes a libtorch header."""
    if path in memo:
        return memo[path]
    memo[path] = False  # a cycle adds nothing new
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    if TORCH.search(text):
        memo[path] = True
        return True
    here = os.path.dirname(path)
    for inc in QUOTED.findall(text):
        for base in [here] + roots:
            cand = os.path.normpath(os.path.join(base, inc))
            if os.path.isfile(cand):
                if includes_torch(cand, roots, memo):
                    memo[path] = True
                    return True
                break
    return False


def main(argv):
    if len(argv) < 2:
        print("usage: torch_free_sources.py SOURCE_DIR FILE...", file=sys.stderr)
        return 2
    src = argv[0]
    roots = [os.path.join(src, "src"), os.path.join(src, "tests"), src]
    memo = {}
    for f in argv[1:]:
        if not includes_torch(os.path.abspath(f), roots, memo):
            print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
