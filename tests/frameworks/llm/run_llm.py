"""``llm``'s own command line with the ``coder`` plugin registered, for the tests.

An installed distribution registers the plugin through its ``llm`` entry point; the tests
run against the source tree, which no installation describes, so this runs ``llm``'s CLI
with its entry-point loading switched off (``LLM_LOAD_PLUGINS`` empty) and the plugin module
registered the way the entry point would register it.
"""

import os
import sys

os.environ["LLM_LOAD_PLUGINS"] = ""

import llm.plugins
from llm.cli import cli

import coder_io_sync.integrations.llm as plugin

llm.plugins.pm.register(plugin, name="coder")

if __name__ == "__main__":
    sys.exit(cli(prog_name="llm"))
