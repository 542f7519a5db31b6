"""``.. fa4run::``: run a tutorial's Python code while the docs build, and show the code and what it printed.

The blocks of one page share one namespace, top to bottom, like the cells of a notebook, but in the Sphinx
process itself: no Jupyter kernel, nothing to install beyond Sphinx. An exception in a block is an error of the
build (with ``-W`` the build fails), so a tutorial that stops working cannot be published.

Options: ``:hide-output:`` shows only the code (for blocks that print nothing worth reading).
"""
from __future__ import annotations

import contextlib
import io
import traceback

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective


class Fa4Run(SphinxDirective):
    has_content = True
    option_spec = {"hide-output": directives.flag}

    def run(self):
        code = "\n".join(self.content)
        # one namespace per page: env.temp_data is emptied after each document is read
        namespace = self.env.temp_data.setdefault("fa4run_namespace", {"__name__": "__fa4run__"})
        source, line = self.get_source_info()
        printed = io.StringIO()
        try:
            compiled = compile(code, f"{source}:{line}", "exec")
            with contextlib.redirect_stdout(printed):
                exec(compiled, namespace)
        except Exception:
            raise self.error(f"fa4run: the block at {source}:{line} raised\n{traceback.format_exc()}") from None
        shown = [nodes.literal_block(code, code, language="python")]
        text = printed.getvalue().rstrip("\n")
        if text and "hide-output" not in self.options:
            output = nodes.literal_block(text, text, language="none")
            output["classes"].append("fa4run-output")
            shown.append(output)
        return shown


def setup(app):
    app.add_directive("fa4run", Fa4Run)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
