"""No function in src/ runs to the limit (default 120 lines): a long function is cut into named
steps that read top to bottom (issue 39). Run by CTest as Structure.FunctionsUnder120Lines;
exits 1 listing each function at or over the limit (file:line, name, length), 0 otherwise.

    /usr/bin/python3 tests/check_function_length.py ROOT [--limit N]

A function is a brace pair opened at namespace or class scope by a '{' whose text before it ends
with ')' (then optionally const, noexcept, override, final, &, && or a trailing '-> type'), or by
a constructor's initializer list. Top-level functions and member functions defined in class
bodies count; a lambda or block inside a function is part of that function. Comments, string
and character literals (raw strings R"d(...)d" included) are blanked first, and of each
#if/#elif/#else chain only the first branch is read, so that braces balance. A function's length
runs from the line its declaration starts on to its closing brace, both included.
"""
import argparse
import os
import re
import sys

EXTENSIONS = (".cpp", ".h", ".cu")
IDENT = re.compile(r"[A-Za-z0-9_]")
RAW_PREFIX = re.compile(r"(?:^|[^A-Za-z0-9_])(?:u8|u|U|L)?R$")
# What may follow a parameter list before the body: qualifiers, then a trailing return type.
QUALIFIERS = r"(?:\s*(?:const|volatile|noexcept(?:\s*\([^()]*\))?|override|final|mutable|&&|&))*"
FUNCTION_HEAD = re.compile(r"\)" + QUALIFIERS + r"(?:\s*->\s*[^;{}()]+(?:\([^()]*\))?)?\s*$")
# A constructor's initializer list: ") :" (not "::") before the members, the last ending in ) or }.
INIT_LIST = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)[\s\S]*[)}]\s*$")
NAMESPACE = re.compile(r'(?:^|\s)namespace(?:\s+[\w:]+)?\s*$|^extern\s*"\s*"\s*$')
CLASS = re.compile(r"(?:^|[\s>])(?:class|struct|union)\b")
ENUM = re.compile(r"(?:^|\s)enum\b")


# What blank() blanks, found left to right: a comment, a raw string, a number (whose digit
# separators 1'000 are not quotes), a string or a character literal.
LITERAL = re.compile(r"""
    (?P<comment>//[^\n]*|/\*[\s\S]*?\*/)
  | (?<!\w)(?:u8|[uUL])?R"(?P<delim>[^(\s"]{0,16})\([\s\S]*?\)(?P=delim)"
  | (?P<number>\b\d(?:[\w.]|'(?=\w))*)
  | "(?:\\.|[^"\\\n])*"
  | '(?:\\.|[^'\\\n])*'
""", re.X)


def blank(text):
    """The text with comments and literals replaced by spaces (newlines kept, so line numbers
    hold); a string literal keeps two quotes, so that extern "C" is still recognized."""
    def spaces(s):
        return re.sub(r"[^\n]", " ", s)

    def blanked(m):
        s = m.group(0)
        if m.group("number"):
            return s
        if not m.group("comment") and s.endswith('"'):
            return '"' + spaces(s[1:-1]) + '"'
        return spaces(s)
    return LITERAL.sub(blanked, text)


def first_branches_only(text):
    """Preprocessor lines blanked, and every #elif/#else branch blanked with them."""
    lines = text.split("\n")
    depth_skipping = []  # per open #if: whether this level's current branch is skipped
    out = []
    continued = False
    for line in lines:
        directive = continued or line.lstrip().startswith("#")
        continued = directive and line.rstrip().endswith("\\")
        if directive:
            word = re.match(r"\s*#\s*(\w*)", line)
            word = word.group(1) if word and not line.lstrip().startswith("\\") else ""
            if word.startswith("if"):
                depth_skipping.append(False)
            elif word in ("elif", "else") and depth_skipping:
                depth_skipping[-1] = True
            elif word == "endif" and depth_skipping:
                depth_skipping.pop()
            out.append("")
        elif any(depth_skipping):
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def head_start(code, start):
    """Offset of the first non-blank character at or after start."""
    while start < len(code) and code[start].isspace():
        start += 1
    return start


def function_name(head):
    """The name before the parameter list (qualified, operator()s included), for the listing."""
    init = INIT_LIST.search(head)
    if init:
        head = head[:init.start() + 1]
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"((?:[\w~]+\s*::\s*)*(?:operator\s*(?:\(\s*\)|[^\s(]+)|[~\w]+))\s*$", head[:k])
                if m and not re.search(r"[)}]\s*$", head[:k]):
                    return re.sub(r"\s+", "", m.group(1))
    return head.split("(")[0].split()[-1] if "(" in head and head.split("(")[0].split() else "?"


def collapse_braces(text):
    """Nested initializers in a declaration's text reduced to {}, innermost first."""
    while True:
        shorter = re.sub(r"\{[^{}]*\}", "{}", text)
        if shorter == text:
            return text
        text = shorter


def functions(code):
    """(start offset, open offset, close offset, head text) of each function in blanked code."""
    found = []
    stack = []  # kinds of open braces: "namespace", "class", "function", "other"
    statement_start = [0]  # where the statement being read at each scope level began
    i = 0
    while i < len(code):
        c = code[i]
        if c == "{":
            in_function = any(k in ("function", "other") for k in stack)
            if in_function:
                stack.append("other")
            else:
                start = head_start(code, statement_start[-1])
                head = collapse_braces(code[start:i]).strip()
                if FUNCTION_HEAD.search(head) or INIT_LIST.search(head):
                    kind = "function"
                elif NAMESPACE.search(head):
                    kind = "namespace"
                elif CLASS.search(head) and not ENUM.search(head) and "=" not in head and "(" not in head:
                    kind = "class"
                else:
                    kind = "other"
                stack.append(kind)
                if kind == "function":
                    found.append([start, i, None, head])
            statement_start.append(i + 1)
        elif c == "}":
            if not stack:
                raise ValueError(f"unbalanced '}}' at offset {i}")
            kind = stack.pop()
            statement_start.pop()
            if kind == "function":
                open_fn = next(f for f in reversed(found) if f[2] is None)
                open_fn[2] = i
            if kind in ("namespace", "class", "function"):
                statement_start[-1] = i + 1
            # an initializer's braces are part of the statement, which goes on to its ';'
        elif c == ";" and not any(k in ("function", "other") for k in stack):
            statement_start[-1] = i + 1
        elif c == ":" and stack and stack[-1] == "class" and re.search(
                r"(?:^|[;{}\s])(?:public|private|protected)\s*$", code[statement_start[-1]:i]):
            statement_start[-1] = i + 1
        i += 1
    if stack:
        raise ValueError(f"{len(stack)} unclosed '{{'")
    return found


def template_prefix_start(code, start):
    """The declaration's start line is its own, not that of a template<...> line above it."""
    m = re.match(r"template\s*<", code[start:])
    if not m:
        return start
    depth, k = 0, start + m.end() - 1
    while k < len(code):
        depth += {"<": 1, ">": -1}.get(code[k], 0)
        k += 1
        if depth == 0:
            break
    return head_start(code, k)


def long_functions(root, limit):
    """(path:line, name, length) of each function of src/ at or over limit lines."""
    out = []
    src = os.path.join(root, "src")
    if not os.path.isdir(src):  # a wrong root must not pass as "nothing too long"
        raise SystemExit(f"{root}: no src/ folder (fix: give the repository root)")
    for dirpath, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(EXTENSIONS):
                continue
            path = os.path.join(dirpath, name)
            with open(path, errors="replace") as f:
                code = blank(first_branches_only(f.read()))
            rel = os.path.relpath(path, root)
            try:
                found = functions(code)
            except ValueError as e:
                raise SystemExit(f"{rel}: cannot match braces ({e})")
            for start, _, close, head in found:
                start = template_prefix_start(code, start)
                first = code.count("\n", 0, start) + 1
                last = code.count("\n", 0, close) + 1
                length = last - first + 1
                if length >= limit:
                    out.append((f"{rel}:{first}", function_name(head), length))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--limit", type=int, default=120)
    args = parser.parse_args()
    bad = long_functions(args.root, args.limit)
    for where, name, length in sorted(bad, key=lambda b: -b[2]):
        print(f"{where}: {name} is {length} lines")
    print(f"{len(bad)} function(s) of {args.limit} lines or more in src/ (cut each into named steps)"
          if bad else f"every function in src/ is under {args.limit} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
