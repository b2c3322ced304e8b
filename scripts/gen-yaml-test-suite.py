#!/usr/bin/env python3
"""Generate tests/data/yaml-test-suite/ from the official YAML test suite.

Usage:
    scripts/gen-yaml-test-suite.py SUITE_GIT_DIR [--data-ref REF] [--verify]

SUITE_GIT_DIR is a clone of https://github.com/yaml/yaml-test-suite (a bare or
mirror clone, or the `.git` of a normal clone) that has the `data-*` release
tags, e.g.

    git clone --mirror https://github.com/yaml/yaml-test-suite /tmp/yts.git
    python3 scripts/gen-yaml-test-suite.py /tmp/yts.git --data-ref data-2022-01-17 --verify

It writes, under tests/data/yaml-test-suite/:

  cases.json  JSON array, sorted by id, of
              {"id", "name", "fail", "yaml"}; `yaml` is the exact input text
              (the suite's `in.yaml`), `fail` is true when the suite has an
              `error` file for the case (the input must be rejected).
  LICENSE     the suite's License file (MIT), from the main-branch commit the
              data release was generated from.
  README.md   provenance and the regeneration command.

Input is the suite's own expanded form (a `data-YYYY-MM-DD` release tag, or
the `data` branch): `ID/in.yaml`, `ID/===`, `ID/error`, and for source files
with several cases `ID/NN/...` (the suite pads NN to 2 digits, or 3 when a
file has more than 10 cases); such cases get the id `ID-NN`, as the suite's
own tooling names them. The `data` export leaves out source files whose first
case says `skip: true`, so those are not here either.

`--verify` also expands the `src/*.yaml` definitions of the main-branch commit
the data was generated from (needs PyYAML), mirroring the suite's
bin/YAMLTestSuite.pm (inheritance of name/tags/yaml between cases of one file,
`fail` not inherited, whole file skipped when its first case has `skip`, the
whitespace-marker unescaping), and fails unless both give identical cases.

The output depends only on the suite's git objects: no timestamps, sorted
keys and ids, stable JSON formatting.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

REPO_URL = "https://github.com/yaml/yaml-test-suite"
ID_RE = re.compile(r"^[0-9A-Z]{4}$")
NUM_RE = re.compile(r"^[0-9]{2,}$")


class Git:
    def __init__(self, git_dir):
        self.git_dir = git_dir

    def run(self, *args, check=True):
        p = subprocess.run(
            ["git", "--git-dir", self.git_dir, *args],
            capture_output=True,
        )
        if check and p.returncode != 0:
            sys.exit(
                "git %s failed: %s" % (" ".join(args), p.stderr.decode(errors="replace"))
            )
        return p

    def rev(self, ref):
        p = self.run("rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False)
        return p.stdout.decode().strip() if p.returncode == 0 else None

    def resolve(self, name):
        """Resolve a branch/tag name, also as a remote-tracking ref."""
        for cand in (name, "refs/tags/" + name, "refs/heads/" + name,
                     "refs/remotes/origin/" + name):
            c = self.rev(cand)
            if c:
                return c
        return None

    def tree(self, commit, path=""):
        """{path: (mode, blob_sha)} of every file under path (recursive)."""
        spec = commit + (":" + path if path else "")
        out = self.run("ls-tree", "-r", "-z", "--full-tree", spec).stdout
        files = {}
        for rec in out.split(b"\0"):
            if not rec:
                continue
            meta, p = rec.split(b"\t", 1)
            mode, typ, sha = meta.split()
            files[p.decode()] = (mode.decode(), sha.decode())
        return files

    def blobs(self, shas):
        """Read many blobs with one `git cat-file --batch`."""
        shas = list(shas)
        if not shas:
            return {}
        p = subprocess.run(
            ["git", "--git-dir", self.git_dir, "cat-file", "--batch"],
            input=("\n".join(shas) + "\n").encode(),
            capture_output=True,
            check=True,
        )
        out, pos, res = p.stdout, 0, {}
        for sha in shas:
            nl = out.index(b"\n", pos)
            header = out[pos:nl].split()
            if len(header) != 3:
                sys.exit("cat-file: bad object %s" % sha)
            size = int(header[2])
            res[sha] = out[nl + 1:nl + 1 + size]
            pos = nl + 1 + size + 1
        return res

    def show(self, commit, path):
        return self.run("show", "%s:%s" % (commit, path)).stdout


def default_data_ref(git):
    """Newest `data-YYYY-MM-DD` release tag, else the `data` branch."""
    out = git.run("for-each-ref", "--format=%(refname:short)", "refs/tags/data-*").stdout
    tags = sorted(t for t in out.decode().split() if re.fullmatch(r"data-\d{4}-\d{2}-\d{2}", t))
    if tags:
        return tags[-1]
    return "data"


def from_data(git, commit):
    """Cases from the suite's expanded `data` layout at `commit`."""
    files = git.tree(commit)
    # Per case directory: {dir: {filename: sha}}; skip the name/ and tags/
    # symlink indexes and anything that is not a regular file.
    dirs = {}
    for path, (mode, sha) in files.items():
        if mode not in ("100644", "100755"):
            continue
        parts = path.split("/")
        if not ID_RE.match(parts[0]):
            continue
        if len(parts) == 2:
            key = parts[0]
        elif len(parts) == 3 and NUM_RE.match(parts[1]):
            key = parts[0] + "-" + parts[1]
        else:
            sys.exit("unexpected path in data tree: %s" % path)
        dirs.setdefault(key, {})[parts[-1]] = sha
    wanted = [d[f] for d in dirs.values() for f in ("in.yaml", "===") if f in d]
    blobs = git.blobs(sorted(set(wanted)))
    cases = []
    for cid in sorted(dirs):
        d = dirs[cid]
        if "in.yaml" not in d or "===" not in d:
            sys.exit("case %s lacks in.yaml or ===" % cid)
        name = blobs[d["==="]].decode("utf-8")
        if not name.endswith("\n"):
            sys.exit("case %s: === does not end in a newline" % cid)
        cases.append({
            "id": cid,
            "name": name[:-1],
            "fail": "error" in d,
            "yaml": blobs[d["in.yaml"]].decode("utf-8"),
        })
    return cases


# --- src/*.yaml expansion, mirroring bin/YAMLTestSuite.pm -------------------

def unescape(text):
    # YAMLTestSuite.pm::unescape, in the same order.
    text = text.replace("\u2423", " ")           # ␣ space
    text = re.sub("\u2014*\u00bb", "\t", text)    # —*» one tab
    text = text.replace("\u2190", "\r")           # ← carriage return
    # ⇔ is documented as a BOM. (The Perl has `s/⇔/x{FEFF}/g`, a missing
    # backslash that would insert the literal "x{FEFF}"; no test uses ⇔.)
    text = text.replace("\u21d4", "\ufeff")
    text = text.replace("\u21b5", "")             # ↵ removed
    text = re.sub("\u220e\n\\Z", "", text)        # ∎ + final newline removed
    return text


def perl_true(v):
    return v is not None and v != "" and v != "0" and v is not False


def from_src(git, commit):
    import yaml  # PyYAML; only needed for --verify

    files = git.tree(commit, "src")
    names = sorted(p for p in files if p.endswith(".yaml"))
    blobs = git.blobs(sorted({files[p][1] for p in names}))
    cases, skipped = [], []
    for path in names:
        fid = path[:-len(".yaml")]
        # BaseLoader: every scalar stays a string (`yaml:` texts untouched).
        data = yaml.load(blobs[files[path][1]].decode("utf-8"), Loader=yaml.BaseLoader)
        if data[0].get("skip") not in (None, "", "0", "false", "False", "FALSE"):
            skipped.append(fid)
            continue
        multi = len(data) > 1
        width = int(math.log(len(data) - 1) / math.log(10)) + 2 if multi else 2
        cache = {}
        for i, test in enumerate(data):
            test = dict(test)
            num = "%0*d" % (width, i)
            cid = "%s-%s" % (fid, num) if multi else fid
            if perl_true(test.get("name")) and perl_true(cache.get("name")):
                sys.exit("Can't change test name in '%s'" % cid)
            for k in ("name", "yaml"):
                if not perl_true(test.get(k)):
                    test[k] = cache.get(k)
                if not perl_true(test.get(k)):
                    sys.exit("%s: no %s" % (cid, k))
            if not perl_true(test.get("tags")):
                test["tags"] = cache.get("tags") or ""
            test["fail"] = "fail" in test
            for k in ("tree", "json", "dump", "emit", "toke"):
                if k not in test and cache.get(k) is not None:
                    test[k] = cache[k]
            cache = dict(test)
            cases.append({
                "id": cid,
                "name": unescape(test["name"]),
                "fail": test["fail"],
                "yaml": unescape(test["yaml"]),
            })
    cases.sort(key=lambda c: c["id"])
    return cases, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite_git_dir", help="git dir of a yaml/yaml-test-suite clone")
    ap.add_argument("--data-ref", help="data release tag or branch "
                    "(default: newest data-YYYY-MM-DD tag, else `data`)")
    ap.add_argument("--src-ref", help="main-branch commit for src/ and License "
                    "(default: the one named in the data commit's message)")
    ap.add_argument("--verify", action="store_true",
                    help="also expand src/*.yaml and require identical cases")
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "yaml-test-suite"))
    args = ap.parse_args()

    git = Git(args.suite_git_dir)
    data_ref = args.data_ref or default_data_ref(git)
    data_commit = git.resolve(data_ref)
    if not data_commit:
        sys.exit("no data ref %r in %s" % (data_ref, args.suite_git_dir))

    msg = git.run("log", "-1", "--format=%s", data_commit).stdout.decode().strip()
    src_ref = args.src_ref
    if not src_ref:
        m = re.fullmatch(r"Regenerated data from main (\S+)", msg)
        if not m:
            sys.exit("cannot tell the main commit of %s (%r); pass --src-ref" % (data_ref, msg))
        src_ref = m.group(1)
    src_commit = git.resolve(src_ref)
    if not src_commit:
        sys.exit("no src ref %r" % src_ref)

    cases = from_data(git, data_commit)
    src_files = git.tree(src_commit, "src")
    all_ids = sorted(p[:-5] for p in src_files if p.endswith(".yaml"))
    data_ids = {c["id"].split("-")[0] for c in cases}
    skipped = [i for i in all_ids if i not in data_ids]

    if args.verify:
        src_cases, src_skipped = from_src(git, src_commit)
        if src_cases != cases or src_skipped != skipped:
            a = {c["id"]: c for c in cases}
            b = {c["id"]: c for c in src_cases}
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    print("MISMATCH %s\n  data: %r\n  src:  %r" % (k, a.get(k), b.get(k)),
                          file=sys.stderr)
            sys.exit("verify failed: data and src expansions differ "
                     "(skipped data=%s src=%s)" % (skipped, src_skipped))
        print("verify: src/*.yaml expansion matches the data release")

    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(out, "LICENSE"), "wb") as f:
        f.write(git.show(src_commit, "License"))

    nfail = sum(c["fail"] for c in cases)
    readme = f"""# YAML test suite inputs (generated)

`cases.json` holds the inputs of the official YAML test suite,
<{REPO_URL}>, as test data: a JSON array, sorted by `id`, of
`{{"id", "name", "fail", "yaml"}}`. `yaml` is the exact input text (the
suite's `in.yaml`, whitespace markers already expanded); `fail: true` means
the suite says a parser must reject it. Source files with several cases give
ids `ID-NN` (`ID-NNN` for the one file with more than 10 cases), as in the
suite itself.

- Generated from: data release `{data_ref}`, commit `{data_commit}`
  ("{msg}"), i.e. main-branch commit `{src_commit}`.
- {len(cases)} cases, {nfail} with `fail: true`. Skipped, because the suite
  itself marks them `skip: true` and leaves them out of its data export:
  {", ".join(skipped) if skipped else "none"}.
- Licence: MIT, Copyright (c) 2016-2020 Ingy döt Net; see `LICENSE` (the
  suite's `License` file at `{src_commit}`).

Do not edit by hand. Regenerate with:

    git clone --mirror {REPO_URL} /tmp/yaml-test-suite.git
    python3 scripts/gen-yaml-test-suite.py /tmp/yaml-test-suite.git --data-ref {data_ref} --verify

(`--verify` needs PyYAML; it re-expands `src/*.yaml` the way the suite's
`bin/YAMLTestSuite.pm` does and checks the result is identical.)
"""
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(readme)
    print("wrote %s: %d cases (%d fail), skipped %s; data %s (%s), main %s"
          % (out, len(cases), nfail, skipped, data_ref, data_commit, src_commit))


if __name__ == "__main__":
    main()
