"""Runs every Python block of docs/pytorch.md's "Examples, one per operation" section
(ctest torch_doc_examples), each in a fresh namespace: the documented examples run and their
asserts hold."""

import os
import re
import sys

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "pytorch.md")


def main():
    text = open(DOC).read()
    start = text.index("## Examples, one per operation")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    if len(blocks) < 9:
        sys.exit(f"doc_examples: found {len(blocks)} examples in {DOC}, expected at least 9")
    for i, code in enumerate(blocks):
        title = code.splitlines()[0].split("#")[-1].strip()
        try:
            exec(compile(code, f"docs/pytorch.md example {i + 1} ({title})", "exec"), {})
        except Exception:
            print(f"example {i + 1} ({title}) failed:\n{code}", file=sys.stderr)
            raise
        print(f"ok: {title}")


if __name__ == "__main__":
    main()
