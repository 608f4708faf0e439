"""What the CLI journeys share: the README tour's inputs, the tiny model's flags, and checks of outputs.

The tour's fixtures themselves (`tour`, `pretrained`, `finetuned`) live in
tests/commands/conftest.py, built once per test process.
"""

import csv
import json
import os
import re
import subprocess
import urllib.request


from cli_helpers import albert_tf_command, start_program, user_environment

# Shrinks the README's `--preset base` to a model that trains in seconds.
TINY_MODEL = ["--embedding-size", "16", "--hidden-size", "32", "--num-layers", "2",
              "--num-heads", "2", "--intermediate-size", "64"]
STDIN_TEXTS = ["a gorgeous, witty film", "", "flat, dull and far too long"]


def write_sentences_corpus(directory, documents):
    """The original ALBERT format: one sentence per line, a blank line between documents."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "reviews.txt"), "w", encoding="utf-8") as f:
        for document in documents:
            f.write("\n".join(document) + "\n\n")
    return directory


def write_sst2(path, rows):
    """GLUE SST-2's layout: a `sentence<TAB>label` header, then one row per sentence."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        writer.writerow(["sentence", "label"])
        writer.writerows(rows)
    return path


def strict_json_lines(text):
    """Parses JSON lines, refusing NaN and Infinity (which Python's json accepts)."""
    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


# A line TensorFlow's C++ logging writes: I0000 00:00:1795.. 1234 file.cc:12] ...
_TF_LOG_LINE = re.compile(r"^[IWE]\d{4} ")


def assert_quiet_stderr(done):
    """No line of TensorFlow's start-up logging in a command's stderr: absl's I/W/E lines, oneDNN's and CUDA's notes."""
    noisy = [line for line in done.stderr.splitlines()
             if _TF_LOG_LINE.match(line) or "oneDNN" in line or "cuda" in line.lower()]
    assert not noisy, (done.args, noisy)


def assert_one_line_error(done, *fragments):
    """Exit 2 and exactly one stderr line, naming what went wrong; no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and all(f in lines[0] for f in fragments), lines[0]


class Server:
    """`albert-tf serve` in a process of its own; the model URL is read from its first line.

    `fresh`: a new `python`, which imports what it needs itself (TF Text's ops for the text signatures);
    else forked by the fork server (tests/fork_server.py), which imported TensorFlow and the commands.
    """

    def __init__(self, *args, cwd, fresh=False):
        self.process = start_program(albert_tf_command() + ["serve", *args, "--port", "0"], cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=user_environment(),
                                     fresh=fresh)
        line = self.process.stdout.readline()
        if " at http" not in line:
            self.process.kill()
            raise AssertionError(f"serve did not start: {line!r}\n{self.process.stderr.read()[-4000:]}")
        self.model_url = line.split(" at ", 1)[1].split()[0].rstrip(",")

    def request(self, url, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
