"""Sphinx configuration of the course's website (`make book` writes it to `site/`).

The source folder is the repository itself (`sphinx-build -c docs . site`), so the README, the
notebooks and the guides link to each other on the site exactly as they do on GitHub. The
notebooks are rendered from their committed outputs by MyST-NB and never executed here; nothing
is fetched at build time: the theme ships its assets and MathJax comes from a PyPI package.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from docutils import nodes

project = "grpo_minimal"
author = "the grpo_minimal authors"
copyright = "2026, the grpo_minimal authors (MIT)"  # noqa: A001 (Sphinx's name)

extensions = ["myst_nb", "sphinx-mathjax-offline"]

# The pages of the site, and only these: the rest of the checkout (.venv, build/, the package's
# sources) is not read. Files they link to that are no page (LICENSE, a .py file) are copied.
root_doc = "README"
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
COURSE = sorted(p.stem for p in NOTEBOOKS.glob("[0-9]*.ipynb"))
LABS = sorted(p.stem for p in (NOTEBOOKS / "labs").glob("*.ipynb"))
GUIDES = ["notebooks/labs/README", "instructor/README"]
REFERENCE = [
    "bench/README",
    "docs/install",
    "docs/gpu",
    "docs/scaling_out",
    "docs/troubleshooting",
    "docs/architecture",
    "docs/equations",
    "recipes/README",
    "data/README",
    "data/TINY_MODEL",
    "data/STANDIN_MODEL",
    "data/REASONING_MODEL",
    "data/TINY_VLM",
    "CHANGELOG",
    "README.ko",
    "docs/glossary.ko",
]
include_patterns = [
    "README.md",
    "README.ko.md",
    "CHANGELOG.md",
    "notebooks/*.ipynb",
    "notebooks/labs/*.ipynb",
    "notebooks/labs/README.md",
    "instructor/README.md",
    "bench/README.md",
    "docs/*.md",
    "recipes/README.md",
    "data/*.md",
]
exclude_patterns = [".venv", ".git", "build", "site", "runs", "**/.ipynb_checkpoints"]

# Render what was committed: no notebook runs while the site builds.
nb_execution_mode = "off"
# Widgets: no widget JavaScript from a CDN; a widget's output shows its text, which tells the
# reader to run the notebook (the lessons draw static figures beside their explorers).
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3  # GitHub-style anchors (#the-course) resolve on the site too
suppress_warnings = ["mystnb.unknown_mime_type"]

html_theme = "sphinx_book_theme"
html_title = "grpo_minimal: GRPO from CartPole to a real LLM"
html_theme_options = {
    "repository_url": "https://github.com/grpo-minimal/grpo_minimal",
    "use_repository_button": True,
    "show_toc_level": 2,
    "use_download_button": False,  # the sources are on GitHub, one click away
}
html_context = {"default_mode": "light"}  # a first visit has no stored mode: start in light
# The tab's icon, drawn for the course (a group's rewards and their mean): without one, every page
# asks for /favicon.ico and gets a 404. Relative to this folder; Sphinx copies it to _static/.
html_favicon = "_static/favicon.png"
html_copy_source = False
html_show_sourcelink = False


def _toctree(caption: str, names: list[str]) -> str:
    lines = "\n".join(names)
    return f"\n\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{lines}\n```\n"


def _add_navigation(app, docname: str, source: list[str]) -> None:
    """The README is the home page; its (hidden) table of contents builds the site's sidebar,
    so README.md itself stays plain Markdown on GitHub."""
    if docname == root_doc:
        source[0] += (
            _toctree("The course", [f"notebooks/{name}" for name in COURSE])
            + _toctree("Labs", GUIDES + [f"notebooks/labs/{name}" for name in LABS])
            + _toctree("Reference", REFERENCE)
        )


def _remote_images_as_text(app, doctree, docname) -> None:
    """A remote image (the "Open in Colab" badge) becomes its alt text, still a link: the site
    loads nothing from another host, so it reads the same offline."""
    for image in list(doctree.findall(nodes.image)):
        if "://" in image["uri"]:
            image.replace_self(nodes.inline(text=image.get("alt", ""), classes=["remote-image"]))


def _index_page(app, exception) -> None:
    """`site/index.html` is the home page (the README's page, which links as README.html)."""
    if exception is None and app.builder.format == "html":
        out = Path(app.outdir)
        shutil.copyfile(out / f"{root_doc}.html", out / "index.html")


def setup(app):
    app.connect("source-read", _add_navigation)
    app.connect("doctree-resolved", _remote_images_as_text)
    app.connect("build-finished", _index_page)
