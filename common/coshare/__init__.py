"""coshare: sharing-aware co-scheduling for HTCondor and Slurm.

The scheduler-agnostic core: the model (:mod:`coshare.model`), the JSON contracts
(:mod:`coshare.schema`), job annotations (:mod:`coshare.ledger.annotations`), the policies
(:mod:`coshare.policies`), the planning cycle (:mod:`coshare.cycle.run`) and the command line
(:mod:`coshare.cli.main`). See DESIGN.md for how the parts fit.
"""

__version__ = "0.1.0"
