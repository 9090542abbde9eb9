"""An MkDocs hook: what the site's HTML needs beyond Markdown.

- Maths as MathML, which browsers draw themselves: ``pymdownx.arithmatex`` (generic mode) marks ``$...$`` and
  ``$$...$$``, and each mark becomes MathML (``latex2mathml``) while the site is built, so pages need no
  JavaScript and nothing from the network to show their equations.
- Docstrings cross-reference in Sphinx's style (``:class:`Run```); the API reference shows those names as
  code, without the role.
"""
import html
import re

from latex2mathml.converter import convert

INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)
SPHINX_ROLE = re.compile(r':(?:class|meth|func|mod|data|attr|exc):(?=<code>)')


def on_page_content(content: str, **_) -> str:
    """A page's HTML with its maths as MathML and its docstrings' Sphinx roles dropped."""
    content = BLOCK.sub(lambda match: convert(html.unescape(match.group(1)), display='block'), content)
    content = INLINE.sub(lambda match: convert(html.unescape(match.group(1))), content)
    return SPHINX_ROLE.sub('', content)
