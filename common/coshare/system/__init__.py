"""The operating system's edges: external programs (argument lists only), bounded file
reads, the cycle's lock and the command line's process set-up for array work."""
