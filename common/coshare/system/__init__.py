"""The operating system's edges: external programs (argument lists only), bounded file
reads and the cycle's lock."""
