#!/usr/bin/env python3
"""List `pub` items that nothing outside their module names.

An item declared `pub` (not `pub(crate)`/`pub(super)`/`pub(in ...)`) in src/
is listed when its name, as a word, appears in no file outside its module:
its own file, and for a `mod.rs` every file below its directory (a module's
descendants may use its private items). tests/ and benches/ count as
outside: `pub` is the library surface they use.

Names are matched as words, so an item sharing its name with something used
elsewhere is not listed (the list errs towards too short, never too long).
Test modules (`#[cfg(test)] mod ...`) are skipped.

    python3 scripts/unused_pub.py [--count] [PATH_PREFIX]

Each line: FILE:LINE KIND NAME. With --count, the total only.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEM = re.compile(
    r"^\s*pub\s+(?:async\s+|const\s+|unsafe\s+)*(fn|struct|enum|trait|type|const|static|mod)\s+([A-Za-z_][A-Za-z0-9_]*)"
)


def rust_files(*dirs):
    for d in dirs:
        for base, _, names in os.walk(os.path.join(ROOT, d)):
            for n in names:
                if n.endswith(".rs"):
                    yield os.path.join(base, n)


def without_tests(text):
    out, i = [], 0
    while True:
        at = text.find("#[cfg(test)]", i)
        if at < 0:
            out.append(text[i:])
            return "".join(out)
        rest = text[at + 12 :].lstrip()
        if not re.match(r"(pub(\([^)]*\))?\s+)?mod\s", rest):
            out.append(text[i : at + 12])
            i = at + 12
            continue
        open_at = text.find("{", at)
        if open_at < 0 or ";" in text[at:open_at]:
            out.append(text[i : at + 12])
            i = at + 12
            continue
        depth, j = 0, open_at
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        out.append(text[i:at])
        out.append("\n" * text[at:j].count("\n"))
        i = j + 1


def main():
    args = [a for a in sys.argv[1:] if a != "--count"]
    prefix = args[0] if args else ""
    texts = {p: open(p, encoding="utf-8").read() for p in rust_files("src", "tests", "benches")}
    words = {p: set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", t)) for p, t in texts.items()}
    found = []
    for path, text in texts.items():
        rel = os.path.relpath(path, ROOT)
        if not rel.startswith("src/") or not rel.startswith(prefix or "src/"):
            continue
        inside = {path}
        if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs"):
            d = os.path.dirname(path)
            inside |= {p for p in texts if p.startswith(d + os.sep)}
        for n, line in enumerate(without_tests(text).split("\n"), 1):
            m = ITEM.match(line)
            if not m:
                continue
            kind, name = m.groups()
            if kind == "mod" or name in ("main", "new", "default"):
                continue
            if not any(name in w for p, w in words.items() if p not in inside):
                found.append(f"{rel}:{n} {kind} {name}")
    if "--count" in sys.argv:
        print(len(found))
    else:
        print("\n".join(sorted(found)))


if __name__ == "__main__":
    main()
