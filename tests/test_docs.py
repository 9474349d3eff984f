"""README and docs/ hold together: every relative link and #anchor resolves, README links
every docs page, each page opens with the paragraph saying what it covers, and README still
opens with its two commands (CI runs the second). Standard library only."""
import glob
import os
import re

import pytest

pytestmark = pytest.mark.fast

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


# A pointer into a page by a section's name, as comments and pages write them:
# (docs/cuda.md, "One GPU, several ranks") or ([design.md](design.md), "Memory order").
POINTER = re.compile(r'(?:\[[^\]]*\]\()?((?:docs/)?[\w-]+\.md)\)?, "([^"]+)"')
SOURCES = ("README.md", "docs", "bench", "csrc", "pycomm", "scripts", "tests", "examples", ".ci")


def sections(path):
    """A page's headings and the bold lead-ins of its paragraphs and bullets ("**Name.**")."""
    with open(path) as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
    found = {m.group(1) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*$", text, flags=re.M)}
    return found | {m.group(1) for m in re.finditer(r"^(?:- )?\*\*([^*]+?)\.?\*\*", text, flags=re.M)}


def source_files():
    for top in SOURCES:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            yield path
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__")) and d != "build"]
            yield from (os.path.join(folder, f) for f in files
                        if f.endswith((".md", ".py", ".sh", ".cpp", ".h", ".cu", ".cuh", ".txt"))
                        or folder.endswith(".ci"))


def test_section_pointers_name_a_section_that_exists():
    bad, seen = [], 0
    for path in source_files():
        if os.path.samefile(path, __file__):
            continue  # its examples above
        with open(path, errors="replace") as f:
            text = f.read()
        for page, section in POINTER.findall(text):
            base = ROOT if page.startswith("docs/") else os.path.dirname(path)
            dest = os.path.join(base, page)
            seen += 1
            if not os.path.exists(dest) or section not in sections(dest):
                bad.append(f'{rel(path)}: ({page}, "{section}")')
    assert seen, "no pointer found: the pattern no longer matches how they are written"
    assert not bad, "pointers to no such section:\n  " + "\n  ".join(bad)


def test_the_python_versions_stated_are_the_ones_pyproject_admits():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        floor = tomllib.load(f)["project"]["requires-python"]
    for page in (README, os.path.join(ROOT, "docs", "install.md")):
        with open(page) as f:
            stated = re.findall(r"Python (3\.\d+) and (3\.\d+)", f.read())
        assert stated, f"{rel(page)} no longer says which Python releases pycomm supports"
        for low, _ in stated:
            assert floor == f">={low}", f"{rel(page)} says Python {low}, pyproject.toml {floor}"
