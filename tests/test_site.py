"""The course's website (`make book`): built offline from the committed notebooks, then read in a
real browser (Debian's Chromium through Playwright, as tests/test_browser.py does).

The site is built as `make book` builds it, into the test's own folder, with the network
namespace dropped (bubblewrap) where bubblewrap is installed, so a builder that fetched a theme
or a script would fail here. The notebooks are not executed: the build must not start a kernel.
Then, served from 127.0.0.1:
- the index and every notebook page load with no console error, no failed request, and no
  request to any other host;
- every image on them has loaded;
- every page whose source holds TeX shows it typeset by MathJax, with no TeX error;
- every notebook page, course and lab, opens with its title: nothing shown in the article (the
  Colab link, "Runs on", the set-up cell) comes before its h1;
- every page names its icon (`<link rel="icon">`), which the build holds and the server serves,
  so no browser asks for a missing /favicon.ico;
- every internal link of every page points at a page that exists, and at an anchor on it.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS  # the widget test's browser, as it starts it

ROOT = Path(__file__).resolve().parents[1]
COURSE = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
LABS = sorted(p.stem for p in (ROOT / "notebooks" / "labs").glob("*.ipynb"))
# Sphinx's own pages (search, index) and its copies of the sources are not course pages
NOT_CHECKED = ("_static/", "_sources/", "_downloads/", "_images/")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium)",
)


def book_command(out: Path, warnings: Path) -> list[str]:
    """The Makefile's `book` target: Sphinx with docs/conf.py over the checkout."""
    return [
        sys.executable,
        "-m",
        "sphinx",
        "-b",
        "html",
        "-q",
        "-c",
        "docs",
        "-w",
        str(warnings),
        ".",
        str(out),
    ]


def test_make_book_runs_the_command_this_test_builds_with():
    recipe = (ROOT / "Makefile").read_text().split("\nbook:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) -m sphinx -b html -q -c docs . build/book/site" in recipe


def _offline(command: list[str], writable: Path) -> list[str]:
    """The command in a network namespace of its own, everything read-only but ``writable``
    (the checkout may itself lie under /tmp), where bwrap is."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return command
    return [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-net",
        "--bind",
        str(writable),
        str(writable),
        "--setenv",
        "TMPDIR",
        str(writable),
        "--die-with-parent",
        *command,
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("book")
    out, warnings = folder / "site", folder / "warnings.txt"
    # Sphinx's doctree cache would be written under the output folder: the checkout stays as it is
    result = subprocess.run(
        _offline(book_command(out, warnings), folder),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # Every warning is a defect but one kind: a link to an anchor that a notebook writes as raw
    # HTML (`<a id="...">`), which MyST cannot see; the link check below finds those anchors.
    unexpected = [
        line
        for line in warnings.read_text().splitlines()
        if line.strip() and "local id not found" not in line
    ]
    assert not unexpected, "\n".join(unexpected)
    return out


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.icons: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "link" and "icon" in (attrs.get("rel") or "").split() and attrs.get("href"):
            self.icons.append(attrs["href"])
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


@functools.cache
def _parsed(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_the_site_has_a_page_for_every_notebook_guide_and_reference(site):
    assert (site / "index.html").read_text() == (site / "README.html").read_text()
    for name in COURSE:
        text = (site / "notebooks" / f"{name}.html").read_text()
        # the notebook's first cell: its Colab link and its run time
        assert (
            f"colab.research.google.com/github/grpo-minimal/grpo_minimal/blob/main/notebooks/{name}.ipynb"
            in text
        )
        assert "Runs on" in text, name
    for name in LABS:
        assert (site / "notebooks" / "labs" / f"{name}.html").exists(), name
    for page in [
        "notebooks/labs/README",
        "instructor/README",
        "bench/README",
        "README.ko",
        "docs/troubleshooting",
        "docs/architecture",
        "docs/gpu",
        "docs/scaling_out",
    ]:
        assert (site / f"{page}.html").exists(), page
    assert not list(site.rglob("*.ipynb")), "a notebook was copied, not rendered"


def test_no_internal_link_points_at_a_missing_page_or_anchor(site):
    broken = []
    for path in sorted(site.rglob("*.html")):
        relative = path.relative_to(site).as_posix()
        if relative.startswith(NOT_CHECKED):
            continue
        for href in _parsed(path).links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.is_relative_to(site.resolve()):
                broken.append(f"{relative}: {href} leaves the site")
            elif target.is_dir() or not target.exists():
                broken.append(f"{relative}: {href} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in _parsed(target).ids:
                    broken.append(f"{relative}: {href} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_every_page_names_an_icon_the_build_holds(site):
    missing = []
    for path in sorted(site.rglob("*.html")):
        relative = path.relative_to(site).as_posix()
        if relative.startswith(NOT_CHECKED):
            continue
        icons = _parsed(path).icons
        if not icons:
            missing.append(f"{relative}: no <link rel=icon> (the browser asks for /favicon.ico)")
        missing.extend(
            f"{relative}: icon {href} (no such file)"
            for href in icons
            if not (path.parent / unquote(urlsplit(href).path)).is_file()
        )
    assert not missing, "\n".join(missing)


# The first thing shown in a page's article, and its h1: the page opens with its title when that
# first thing lies inside the h1 (a text, an image, a form control: the Colab link, the "Runs on"
# paragraph and the set-up cell's code are each one).
_OPENING = """() => {
    const article = document.querySelector('article.bd-article');
    if (!article) return {first: null, h1: null, inside: false};
    const h1 = article.querySelector('h1');
    const walker = document.createTreeWalker(article, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
    let first = null;
    for (let node = walker.nextNode(); node && !first; node = walker.nextNode()) {
        const element = node.nodeType === Node.TEXT_NODE ? node.parentElement : node;
        if (element.getClientRects().length === 0) continue;  // not shown
        if (node.nodeType === Node.TEXT_NODE ? node.data.trim() : /^(IMG|SVG|INPUT|TEXTAREA|IFRAME)$/i.test(node.nodeName)) {
            first = node;
        }
    }
    const text = (node) => (node.nodeType === Node.TEXT_NODE ? node.data : node.outerHTML).trim().slice(0, 80);
    return {
        first: first && text(first),
        h1: h1 && h1.textContent.replace(/#$/, '').trim(),
        inside: Boolean(first && h1 && h1.contains(first)),
    };
}"""


def _title_of(page: str) -> str:
    """The notebook's title: the text of its first Markdown heading."""
    import nbformat

    notebook = nbformat.read(ROOT / page.replace(".html", ".ipynb"), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            return cell.source.splitlines()[0].removeprefix("# ").strip()
    raise AssertionError(f"{page}: its notebook has no title")


def test_pages_load_in_chromium_with_images_and_typeset_math(site):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    # the lab pages are read for their title and icon (and errors, requests, images) only: their
    # TeX is not checked here
    labs = [f"notebooks/labs/{name}.html" for name in LABS]
    notebooks = [f"notebooks/{name}.html" for name in COURSE] + labs
    pages = ["index.html"] + notebooks
    problems: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page()
            current = [""]

            def elsewhere(route):
                problems.append(f"{current[0]}: request to another host {route.request.url}")
                route.abort()

            page.route(lambda url: not url.startswith(base), elsewhere)
            page.on(
                "console",
                lambda m: (
                    m.type == "error" and problems.append(f"{current[0]}: console error {m.text}")
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"{current[0]}: page error {e}"))
            page.on(
                "requestfailed",
                lambda r: problems.append(f"{current[0]}: failed request {r.url} {r.failure}"),
            )
            page.on(
                "response",
                lambda r: (
                    r.status >= 400
                    and problems.append(f"{current[0]}: HTTP {r.status} for {r.url}")
                ),
            )
            for name in pages:
                current[0] = name
                # networkidle: the page's own late requests (Chromium fetches the icon after
                # load) finish here, not aborted by the next page or by closing the browser
                page.goto(base + name, wait_until="networkidle")
                source = "" if name in labs else _source_of(name)
                if "$" in source or "\\begin{" in source:
                    # MathJax typesets after load: wait for it, then look for its output
                    try:
                        page.wait_for_function(
                            "() => window.MathJax?.startup?.promise", timeout=20_000
                        )
                        page.evaluate("() => MathJax.startup.promise")
                    except PlaywrightTimeout:
                        problems.append(f"{name}: MathJax never started")
                    if page.locator("mjx-container").count() == 0:
                        problems.append(f"{name}: TeX in the source, no typeset math")
                    if page.locator("mjx-merror").count():
                        problems.append(
                            f"{name}: a TeX error: {page.locator('mjx-merror').first.inner_text()}"
                        )
                unloaded = page.evaluate("""() => [...document.images]
                    .filter((img) => !img.complete || img.naturalWidth === 0)
                    .map((img) => img.getAttribute('src'))""")
                problems.extend(f"{name}: image not loaded {src}" for src in unloaded)
                # headless Chromium asks for no icon: fetch the one the page names, as tabs do
                icon = page.evaluate("() => document.querySelector('link[rel~=icon]')?.href")
                if icon is None:
                    problems.append(f"{name}: no icon named (a browser asks for /favicon.ico)")
                else:
                    fetched = page.request.get(icon)
                    if not fetched.ok or not fetched.headers["content-type"].startswith("image/"):
                        problems.append(f"{name}: icon {icon}: HTTP {fetched.status}")
                if name in notebooks:
                    opening = page.evaluate(_OPENING)
                    if not opening["inside"]:
                        problems.append(
                            f"{name}: opens with {opening['first']!r}, not its title (h1 "
                            f"{opening['h1']!r})"
                        )
                    elif opening["h1"] != _title_of(name):
                        problems.append(f"{name}: h1 {opening['h1']!r}, not {_title_of(name)!r}")
            browser.close()
    finally:
        server.shutdown()
    assert not problems, "\n".join(problems)


def _source_of(page: str) -> str:
    """The Markdown of a page's source: notebook cells, or the README for the index."""
    if page == "index.html":
        return (ROOT / "README.md").read_text()
    import nbformat

    notebook = nbformat.read(ROOT / page.replace(".html", ".ipynb"), as_version=4)
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
