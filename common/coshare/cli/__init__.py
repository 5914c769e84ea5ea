"""The ``coshare`` command line: the root group, the scheduler groups, the tables an admin
reads, the generated reference and the exit statuses."""

from coshare.system.arrays import set_up

set_up()  # before numpy's import (coshare.system.arrays says why)
