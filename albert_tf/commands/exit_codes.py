"""The exit codes `albert-tf` returns besides 0, shared by `albert_tf.cli` and the commands."""

# Bad input: a one-line error naming the flag or file.
EXIT_USER_ERROR = 2
# The shell's code for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130
# A run stopped by SIGTERM after saving its step: 128 + 15, what a process
# killed by SIGTERM reports to its shell or container runtime, and the
# "restart" code of TensorFlow's own preemption handler on Google Cloud; a
# scheduler that retries preempted jobs reruns the command, which resumes.
EXIT_PREEMPTED = 143
