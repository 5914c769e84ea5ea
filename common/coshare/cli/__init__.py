"""The ``coshare`` command line: the root group, the scheduler groups, the tables an admin
reads, the generated reference and the exit statuses."""
