#!/usr/bin/env python3
"""Replace each quoted sample in README.md with the current docs/samples/
file: a ```text block whose first line is the sample's first line (or a
`SAMPLE:FILE` placeholder). Lines the README elides with `...` are kept
elided: runs of similar lines (changes past the second, the stripped
list, output lines) and the diff past its first file."""
import os, re, sys
root = os.path.join(os.path.dirname(__file__), "..", "..")
readme = os.path.join(root, "README.md")
text = open(readme).read()
for f in ["execute-normalize-blog-frontmatter.txt", "tour-1-execute.txt", "tour-3-diff.txt", "tour-4-promote.txt", "hook-claude-code-promote.json"]:
    sample = open(os.path.join(root, "docs/samples", f)).read().rstrip("\n")
    lines = sample.split("\n")
    if f == "tour-3-diff.txt":
        cut = [i for i, l in enumerate(lines) if l.startswith("--- ")]
        if len(cut) > 1:
            lines = lines[: cut[1]] + ["..."]
    else:
        # Elide the run of similar lines: changes past the second, the
        # stripped list, the output's lines.
        drop = re.compile(r"  M blog/post-(0[3-9]|1\d)|stripped: |  \| ")
        out = []
        for l in lines:
            if drop.match(l):
                if out[-1] != "  ...":
                    out.append("  ...")
            else:
                out.append(l)
        lines = out
    body = "\n".join(lines)
    ph = "SAMPLE:" + f
    if ph in text:
        text = text.replace(ph, body)
        continue
    first = lines[0]
    m = re.search(r"```text\n" + re.escape(first) + r"\n.*?```", text, re.S)
    if not m:
        sys.exit(f"README.md does not quote docs/samples/{f}")
    text = text[: m.start()] + "```text\n" + body + "\n```" + text[m.end():]
open(readme, "w").write(text)
