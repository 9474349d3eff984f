"""README and docs/ hold together: every relative link and #anchor resolves, README links
every docs page, each page opens with the paragraph saying what it covers, and README still
opens with its two commands (CI runs the second). Standard library only."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
PAGES = [README, *DOCS] + [p for p in [os.path.join(ROOT, "examples", "README.md")]
                           if os.path.exists(p)]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text):
    """The text outside fenced code blocks and inline code."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path):
    """The anchors GitHub makes of a Markdown file's headings (a repeated one gets -1, -2)."""
    seen, out = {}, set()
    with open(path) as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*$", text, flags=re.M):
        slug = "".join(c for c in m.group(1).lower() if c.isalnum() or c in " -_").replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def rel(path):
    return os.path.relpath(path, ROOT)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_links_and_anchors_resolve(page):
    with open(page) as f:
        text = prose(f.read())
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(dest):
            bad.append(f"{target}: no {rel(dest)}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with anchor #{anchor} in {rel(dest)}")
    assert not bad, f"{rel(page)}:\n  " + "\n  ".join(bad)


def test_readme_links_every_docs_page():
    with open(README) as f:
        linked = {os.path.normpath(os.path.join(ROOT, t.partition("#")[0]))
                  for t in LINK.findall(prose(f.read()))}
    missing = [rel(p) for p in DOCS if p not in linked]
    assert not missing, f"README links no {missing}"


@pytest.mark.parametrize("page", DOCS, ids=rel)
def test_each_page_opens_with_what_it_covers(page):
    with open(page) as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("# "), f"{rel(page)}: no title on its first line"
    first = next(line for line in lines[1:] if line.strip())
    assert not first.startswith(("#", "-", "|", "```", "*")), \
        f"{rel(page)}: the title is not followed by a paragraph: {first!r}"


def test_readme_opens_with_its_two_commands():
    with open(README) as f:
        lines = f.read().splitlines()
    assert lines[9:15] == [
        "```bash",
        "# Main job: set up a fresh machine, then run the ResNet-50 comparison (CPU ranks; GPUs when present)",
        "scripts/setup.sh && python3 bench/ddp_resnet50.py",
        "# Tests: set up, then the native tests (plain, ThreadSanitizer, AddressSanitizer) and pytest",
        "scripts/setup.sh && scripts/native_tests.sh && python3 -m pytest",
        "```",
    ]
