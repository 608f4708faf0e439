"""A Python snippet as a program the tests start: `python tests/snippet_worker.py CODE ARGS...`.

Runs CODE as `python -c CODE ARGS...` runs it (`sys.argv` is `["-c", *ARGS]`, `__name__` is
"__main__"), but forked by the fork server as the other worker scripts are (tests/fork_server.py):
a process of its own whose TensorFlow runtime starts when CODE runs its first op, so CODE can still
split the CPU into logical devices first. A snippet about start-up, about what a process imports or
about Keras' backend (read when Keras is imported) runs as `python -c` instead.
"""

import sys

if __name__ == "__main__":
    code = sys.argv[1]
    sys.argv = ["-c", *sys.argv[2:]]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
