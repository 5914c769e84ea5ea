"""The Slurm adapter of coshare: Source and Editor over the Slurm CLI's JSON output, the
prolog, and configuration snippets."""
