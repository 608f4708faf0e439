"""`saved_model_cli` with TF Text's ops registered, as a program the tests start.

`run` imports the whole graph, text signatures included, as TF-Serving does (`show` needs no ops: the
tests run it as the installed console script, in a fresh process). Forked by the fork server as the
other worker scripts are (tests/fork_server.py): its ops run in a process of its own.

    python tests/saved_model_cli_worker.py run --dir DIR --tag_set serve --signature_def NAME --input_exprs ...
"""

import sys

import tensorflow_text  # noqa: F401  (registers TF Text's ops)
from tensorflow.python.tools.saved_model_cli import main

if __name__ == "__main__":
    sys.argv[0] = "saved_model_cli"
    sys.exit(main())
