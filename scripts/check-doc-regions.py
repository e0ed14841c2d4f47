#!/usr/bin/env python3
"""Checks that a page quotes the code ctest runs.

    scripts/check-doc-regions.py DOC SOURCE...

Every region of a SOURCE between a line containing "[doc:NAME]" and one containing
"[/doc:NAME]" must appear in DOC verbatim, after removing the indentation its lines share.
Prints the regions that do not and exits 1; exits 0 when all do.
"""
import re
import sys


def regions(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    open_at = {}
    for i, line in enumerate(lines):
        m = re.search(r"\[(/?)doc:([\w-]+)\]", line)
        if not m:
            continue
        if not m.group(1):
            open_at[m.group(2)] = i
        elif m.group(2) in open_at:
            body = lines[open_at.pop(m.group(2)) + 1:i]
            indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
            yield m.group(2), "\n".join(l[indent:] for l in body)
    for name in open_at:
        yield name, None


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    doc = open(sys.argv[1], encoding="utf-8").read()
    bad = 0
    for source in sys.argv[2:]:
        for name, text in regions(source):
            if text is None:
                print(f"{source}: [doc:{name}] is never closed")
                bad += 1
            elif text not in doc:
                print(f"{source}: region [doc:{name}] is not in {sys.argv[1]} verbatim:\n{text}\n")
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
