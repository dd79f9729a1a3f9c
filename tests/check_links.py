"""Links a reader can follow: every relative markdown link in README.md and docs/**/*.md resolves.

    /usr/bin/python3 tests/check_links.py [REPO_DIR]

For each file, every inline link `[text](target)` and image `![alt](target)` whose target is a
relative path must name an existing file or folder, relative to the file that links it. Targets
with a scheme (http:, https:, mailto:, ...) and pure `#anchor` links are skipped; a `#anchor` or
`?query` suffix is stripped before the path is checked. Links inside fenced code blocks and inline
code spans are not links and are ignored. README.md must also stay a front door: at most
MAX_README_LINES lines. Exits 1 listing every broken link (file:line: target) and the length
problem, 0 with a one-line summary otherwise. Standard library only.
"""
import os
import re
import sys

MAX_README_LINES = 300

# [text](target) or ![alt](target); the text may hold nested brackets one level deep; the target
# may be wrapped in <...> and may be followed by a "title".
LINK_RE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE_RE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN_RE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def markdown_files(repo):
    files = [os.path.join(repo, "README.md")]
    for dirpath, dirnames, filenames in os.walk(os.path.join(repo, "docs")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".md"))
    return files


def links(text):
    """(line number, target) for every inline link outside code blocks and code spans."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE_RE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is not None:
            continue
        line = CODE_SPAN_RE.sub(lambda c: " " * len(c.group(0)), line)
        for lm in LINK_RE.finditer(line):
            target = lm.group(1).strip()
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1].strip()
            yield number, target


def broken_links(repo, path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(path, repo)
    checked, broken = 0, []
    for number, target in links(text):
        if not target or target.startswith("#") or SCHEME_RE.match(target):
            continue
        checked += 1
        file_part = re.split(r"[#?]", target, 1)[0]
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        if not os.path.exists(resolved):
            broken.append(f"{rel}:{number}: {target} (no such file: {os.path.relpath(resolved, repo)})")
    return checked, broken


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    repo = os.path.abspath(repo)
    problems, checked = [], 0
    files = markdown_files(repo)
    for path in files:
        if not os.path.isfile(path):
            problems.append(f"{os.path.relpath(path, repo)}: missing")
            continue
        n, broken = broken_links(repo, path)
        checked += n
        problems.extend(broken)
    readme = os.path.join(repo, "README.md")
    if os.path.isfile(readme):
        with open(readme, encoding="utf-8") as f:
            lines = f.read().count("\n")
        if lines > MAX_README_LINES:
            problems.append(f"README.md: {lines} lines, more than {MAX_README_LINES} (move detail into docs/)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in {len(files)} markdown files")
        return 1
    print(f"every link resolves: {checked} relative links in {len(files)} markdown files; README.md {lines} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
