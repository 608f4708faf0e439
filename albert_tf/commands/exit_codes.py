"""The exit codes `albert-tf` returns besides 0, shared by `albert_tf.cli` and the commands."""

# Bad input: a one-line error naming the flag or file.
EXIT_USER_ERROR = 2
# The shell's code for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130
