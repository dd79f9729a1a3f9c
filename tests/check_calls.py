"""Calls the project's C++ must not make, each with the reason and the replacement. Run by CTest as
Structure.NoBannedCalls over src/, tests/ and examples/; exits 1 listing each use (file:line, the
call, the fix), 0 otherwise. A mention in a comment is not a use.

    /usr/bin/python3 tests/check_calls.py [ROOT]
"""
import os
import re
import sys

# call pattern -> why, and what to use instead
BANNED = {
    r"\bremove_all\s*\(": "pip's libtorch 2.x exports its own std::filesystem::remove_all, which the dynamic "
                          "linker binds ahead of libstdc++'s and which crashes (the 2.11 suite segfaulted twice "
                          "on it); use scaleinv::remove_tree (brain/util/atomic_file.h)",
}
FOLDERS = ["src", "tests", "examples"]
COMMENT = re.compile(r"//.*$")


def uses(root):
    out = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".h", ".hpp", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        code = COMMENT.sub("", line)
                        for pattern, fix in BANNED.items():
                            if re.search(pattern, code):
                                out.append(f"{os.path.relpath(path, root)}:{n}: {code.strip()} (fix: {fix})")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = uses(root)
    for u in bad:
        print(u)
    print(f"{len(bad)} banned call(s)" if bad else "no banned calls")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
