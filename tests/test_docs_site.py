"""The documentation site as a reader sees it: built by scripts/docs (antsibull-docs + Sphinx),
opened in headless Chromium (Debian's package, installed by testbed/browser.py when missing).

What is asserted comes from the sources, not from copies of them: the guides' titles and the
per-release table from docs/docsite/rst/, the role's entry points from its argument_specs, the
module's short description from its DOCUMENTATION. The screenshots stay in .cache/docs/shots/
for a person to look at. Every link inside the site, #anchors included, must land.
"""

from __future__ import annotations

import html.parser
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple
from urllib.parse import unquote, urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "testbed"))
import browser  # noqa: E402

SITE = REPO / ".cache" / "docs" / "html"
SHOTS = REPO / ".cache" / "docs" / "shots"
GUIDES = REPO / "docs" / "docsite" / "rst"
PAGES = REPO / ".cache" / "docs" / "html" / "collections" / "fleetops" / "sglang"
# name -> (page, window height): tall enough for each picture to show what the page is about
# (the whole per-release table, the scaling plot under the benchmark table).
SCREENSHOTS: Dict[str, Tuple[Path, int]] = {
    "index": (SITE / "index.html", 900),
    "role": (PAGES / "sglang_role.html", 900),
    "module": (PAGES / "sglang_probe_module.html", 900),
    "guide_releases": (PAGES / "docsite" / "guide_releases.html", 1250),
    "guide_performance": (PAGES / "docsite" / "guide_performance.html", 2100),
}


class _Page(html.parser.HTMLParser):
    """What the tests read from a page: headings, table rows, links, ids, image sources."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.headings: List[str] = []
        self.rows: List[List[str]] = []
        self.links: List[str] = []
        self.sources: List[str] = []
        self.ids: Set[str] = set()
        self._heading: List[str] | None = None
        self._row: List[str] | None = None
        self._cell: List[str] | None = None
        self._skip = 0  # the ¶ permalinks Sphinx appends to headings

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
            if "headerlink" in a.get("class", ""):
                self._skip += 1
        if tag in ("img", "script") and a.get("src"):
            self.sources.append(a["src"])
        if tag == "link" and a.get("href"):
            self.links.append(a["href"])
        if tag in ("h1", "h2", "h3", "h4"):
            self._heading = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._skip and self._heading is not None:
            self._skip -= 1
        if tag in ("h1", "h2", "h3", "h4") and self._heading is not None:
            self.headings.append(_norm("".join(self._heading)))
            self._heading = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(_norm("".join(self._cell)))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None and not self._skip:
            self._heading.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _norm(text: str) -> str:
    """Text as compared: one space for any run of white space, typographic quotes made plain
    (Sphinx's smartquotes turn "x" and 'x' into curly ones)."""
    text = text.translate(str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"}))
    return " ".join(text.replace("\u00b6", "").split())


def _parse(markup: str) -> _Page:
    page = _Page()
    page.feed(markup)
    return page


def _rst_plain(text: str) -> str:
    """An RST cell's text as rendered: inline literals, emphasis and references unwrapped."""
    text = re.sub(r":\w+:`([^`<]*?)\s*(?:<[^>]*>)?`", r"\1", text)
    text = re.sub(r"``(.+?)``", r"\1", text)
    text = re.sub(r"\*\*(.+?)\*\*|\*(.+?)\*", lambda m: m.group(1) or m.group(2), text)
    return _norm(text)


def _rst_titles(rst: Path) -> List[str]:
    """The guide's section titles, in order (a line underlined with = or -)."""
    lines = rst.read_text(encoding="utf-8").splitlines()
    return [_rst_plain(lines[i]) for i in range(len(lines) - 1)
            if lines[i].strip() and re.fullmatch(r"([=\-~^])\1{2,}", lines[i + 1])
            and len(lines[i + 1]) >= len(lines[i].rstrip())]


def _rst_list_table_rows(rst: Path) -> List[List[str]]:
    """The rows of the guide's first list-table (its header row included), cells as rendered."""
    lines = rst.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(".. list-table::"))
    rows: List[List[str]] = []
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break
        if m := re.match(r"^   \* - (.*)$", line):
            rows.append([m.group(1)])
        elif m := re.match(r"^     - (.*)$", line):
            rows[-1].append(m.group(1))
        elif line.startswith("       ") and rows:
            rows[-1][-1] += " " + line.strip()  # a cell continued on the next line
    return [[_rst_plain(c) for c in row] for row in rows]


@pytest.fixture(scope="module")
def site() -> Path:
    """The built site; scripts/docs returns at once when the suite's docs job built it already
    (it holds a lock while it builds, so the two never build at the same time)."""
    subprocess.run([str(REPO / "scripts" / "docs")], cwd=REPO, check=True)
    assert (SITE / "index.html").is_file()
    return SITE


@pytest.fixture(scope="module")
def dom(site: Path) -> Dict[str, _Page]:
    """Each page as Chromium rendered it, and its screenshot kept under .cache/docs/shots/."""
    pages = {}
    for name, (path, height) in SCREENSHOTS.items():
        url = path.as_uri()
        shot = SHOTS / f"{name}.png"
        pages[name] = _parse(browser.snapshot(url, shot, width=1280, height=height, budget_ms=1000))
        assert shot.stat().st_size > 10_000, f"{shot}: a blank page?"
    return pages


def test_the_index_lists_every_guide_by_its_title(dom: Dict[str, _Page]) -> None:
    index = dom["index"]
    assert index.headings[0] == "fleetops.sglang"
    listed = [n for s in yaml.safe_load((REPO / "docs/docsite/extra-docs.yml").read_text())["sections"]
              for n in s["toctree"]]
    page = (SITE / "index.html").read_text(encoding="utf-8")
    for name in listed:
        title = _rst_titles(GUIDES / f"{name}.rst")[0]
        href = f"collections/fleetops/sglang/docsite/{name}.html"
        assert re.search(rf'href="{re.escape(href)}#?[^"]*"[^>]*>(<[^>]+>)*{re.escape(title)}<', _amp(page)), \
            f"the index links {name} by its title {title!r}"


def _amp(markup: str) -> str:
    return _norm(markup.replace("&amp;", "&").replace("&#8217;", "'").replace("\u2019", "'"))


def test_the_role_page_shows_every_entry_point_and_its_options(dom: Dict[str, _Page]) -> None:
    role = dom["role"]
    specs = yaml.safe_load((REPO / "roles/sglang/meta/argument_specs.yml").read_text())["argument_specs"]
    main = _norm(specs["main"]["short_description"])
    assert role.headings[0] == f"fleetops.sglang.sglang role – {main}"
    for entry, spec in specs.items():
        assert f"Entry point {entry} – {_norm(spec['short_description'])}" in role.headings, entry
    text = _norm(" ".join(" ".join(r) for r in role.rows))
    for option in specs["main"]["options"]:
        assert option in text, f"main's option {option} is in the role page's parameter table"


def test_the_module_page_shows_its_documentation(dom: Dict[str, _Page]) -> None:
    module = dom["module"]
    source = (REPO / "plugins/modules/sglang_probe.py").read_text(encoding="utf-8")
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r?"""(.*?)"""', source, re.S).group(1))
    assert module.headings[0] == f"fleetops.sglang.sglang_probe module – {_norm(doc['short_description'])}"
    for heading in ("Synopsis", "Parameters", "Examples", "Return Values"):
        assert heading in module.headings, heading
    text = _norm(" ".join(" ".join(r) for r in module.rows))
    for option in doc["options"]:
        assert option in text, f"option {option} is in the parameter table"


def test_the_release_guide_shows_its_sections_and_every_release_row(dom: Dict[str, _Page]) -> None:
    guide = dom["guide_releases"]
    rst = GUIDES / "guide_releases.rst"
    titles = _rst_titles(rst)
    assert titles and guide.headings == titles
    expected = _rst_list_table_rows(rst)
    assert len(expected) > 5, "the per-release table was read from the guide"
    assert guide.rows[:len(expected)] == expected


def test_the_guides_show_their_pictures(site: Path, dom: Dict[str, _Page]) -> None:
    """Every image a guide names is in the site, byte for byte, where its page points."""
    for rst in sorted(GUIDES.glob("*.rst")):
        names = re.findall(r"^\s*\.\. (?:image|figure):: (\S+)", rst.read_text(encoding="utf-8"), re.M)
        if not names:
            continue
        page_path = PAGES / "docsite" / f"{rst.stem}.html"
        srcs = _parse(page_path.read_text(encoding="utf-8")).sources
        images = [(page_path.parent / unquote(s)).resolve() for s in srcs if s.endswith((".png", ".svg", ".jpg"))]
        for name in names:
            want = (rst.parent / name).read_bytes()
            assert any(i.is_file() and i.read_bytes() == want for i in images), f"{rst.name}: {name}"
    assert any(s.endswith("scale.png") for s in dom["guide_performance"].sources)


def test_no_guide_shows_raw_markup(site: Path) -> None:
    """RST cannot nest inline markup: **``x``** renders its backticks as text. Outside code
    blocks and literals, no guide's page may show `` or a Markdown link."""
    for page_path in sorted((PAGES / "docsite").glob("*.html")):
        markup = page_path.read_text(encoding="utf-8")
        body = markup[markup.index('itemprop="articleBody"'):]
        body = re.sub(r"<(pre|code)\b.*?</\1>", " ", body, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", body)
        for raw in ("``", "**", "]("):
            assert raw not in text, f"{page_path.name}: {raw!r} shown as text near " \
                f"{text[max(0, text.index(raw) - 80):text.index(raw) + 80]!r}"


def test_every_link_inside_the_site_lands(site: Path, dom: Dict[str, _Page]) -> None:
    """Every page's relative links, stylesheets, scripts and images name a file of the site, and
    every #anchor an id on its page; the rendered pages' links as well as the built files'."""
    parsed: Dict[Path, _Page] = {}

    def page(path: Path) -> _Page:
        if path not in parsed:
            parsed[path] = _parse(path.read_text(encoding="utf-8"))
        return parsed[path]

    bad: List[str] = []
    checked = 0
    sources = [(p, page(p)) for p in sorted(site.rglob("*.html"))]
    sources += [(SCREENSHOTS[name][0], rendered) for name, rendered in dom.items()]
    for path, content in sources:
        for ref in content.links + content.sources:
            parts = urlsplit(ref)
            if parts.scheme or parts.netloc or ref.startswith("javascript:"):
                continue  # outside the site (the repository, docs.ansible.com)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            where = f"{path.relative_to(site)}: {ref}"
            checked += 1
            if not target.is_relative_to(site.resolve()):
                bad.append(f"{where}: outside the site")
            elif target.is_dir():
                bad.append(f"{where}: a directory")
            elif not target.is_file():
                bad.append(f"{where}: no such file")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in page(target).ids:
                bad.append(f"{where}: no such anchor")
    assert checked > 1000, checked
    assert not bad, "\n".join(bad)


def test_the_lint_never_gets_a_temporary_directory_whose_name_ends_in_an_underscore(tmp_path):
    """antsibull-docs lints each plugin page with the path of its copy of the collection in it
    (tempfile.mkdtemp(prefix="antsibull-docs-")); a name ending in "_" is an RST reference there
    ('Unknown target name'), one lint in 37. scripts/antsibull-docs draws names without that ending,
    and scripts/docs lints through it."""
    import importlib.util
    import tempfile
    from importlib.machinery import SourceFileLoader

    script = REPO / "scripts" / "antsibull-docs"
    original = tempfile._RandomNameSequence.__next__
    loader = SourceFileLoader("antsibull_docs_wrapper", str(script))
    spec = importlib.util.spec_from_loader("antsibull_docs_wrapper", loader)
    try:
        loader.exec_module(importlib.util.module_from_spec(spec))
        names = [os.path.basename(tempfile.mkdtemp(prefix="antsibull-docs-", dir=tmp_path)) for _ in range(2000)]
    finally:
        tempfile._RandomNameSequence.__next__ = original
    # About 54 of 2000 would end in "_" without it; every name is still tempfile's 8 characters.
    assert not [n for n in names if n.endswith("_")]
    assert all(re.fullmatch(r"antsibull-docs-[a-z0-9_]{8}", n) for n in names) and len(set(names)) == 2000
    docs = (REPO / "scripts" / "docs").read_text()
    lint = [line for line in docs.splitlines() if "lint-collection-docs" in line and not line.startswith(("#", "log"))]
    assert lint and all('scripts/antsibull-docs" lint-collection-docs' in line for line in lint), lint
