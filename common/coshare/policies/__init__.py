"""Placement policies, one module each, behind the :class:`~coshare.ports.Policy`
protocol; the live cycle and the simulator build them the same way, with :func:`make_policy`.

==========  =====================================================================
name        what it does
==========  =====================================================================
exclusive   one job per device (paper's MC, Spread-n-Share's CE): today's clusters
random      seeded random order, first fit, sharing allowed (paper's MCC)
knapsack    per-device 0-1 knapsack, greedy over the cluster (paper's MCCK)
bestfit     least leftover cores and device share per node (fragmentation benchmark)
fgd         least growth of expected fragmentation (FGD, the benchmark's best peer)
sharepack   knapsack when contended, node potential otherwise (the default)
membw       memory bandwidth use per node summed within a limit (poncos)
collocate   CPU jobs on the cores GPU jobs leave idle (Wu & Hong)
sns         Spread-n-Share: scale jobs out by their profiles, share nodes, LLC ways
cs          compact-share: Spread-n-Share's baseline, node sharing at the lowest scale
==========  =====================================================================

Later policies register here too (``collocate``, ``membw``, ``sns``, ``cs``): add a module
and one entry in :data:`FACTORIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coshare.errors import PolicyError
from coshare.ledger.bounds import unknown_name
from coshare.model import ThreadMode
from coshare.policies.base import Policy
from coshare.policies.bestfit import BestFitPolicy
from coshare.policies.collocate import (
    DEFAULT_COPY_BW_LIMIT_MBPS,
    DEFAULT_MAX_HARVEST_CORES,
    DEFAULT_MONITOR_FRACTION,
    CollocatePolicy,
)
from coshare.policies.exclusive import ExclusivePolicy
from coshare.policies.fgd import FgdPolicy, Shape
from coshare.policies.gang import GangPlanner
from coshare.policies.knapsack import MAX_DP_CELLS, MAX_MEMORY_CELLS, KnapsackPolicy
from coshare.policies.membw import MembwPolicy
from coshare.policies.potential import Shape as WorkloadShape
from coshare.policies.random_fit import RandomPolicy
from coshare.policies.sharepack import SharePackPolicy
from coshare.policies.sns import DEFAULT_WAYS_WEIGHT, SnsPolicy
from coshare.profiles.programs import DEFAULT_ALPHA, Profile

__all__ = ["DEFAULT_POLICY", "FACTORIES", "Policy", "PolicyOptions", "make_policy", "policy_names"]


class PolicyOptions:
    """The options a policy may take, gathered from the configuration.

    Attributes mirror ``policy`` and ``knapsack`` config sections; a factory reads what it
    needs and ignores the rest. ``workload`` is the expected job shapes of ``sharepack``
    (:func:`~coshare.policies.potential.expected_shapes`), ``None`` to take them from each
    snapshot. ``fgd_workload`` is FGD's target workload (shapes with
    counts) when the caller knows it, as the fragmentation benchmark does; ``None`` takes it
    from each snapshot. ``bestfit_scale`` is BestFit's (cpu_milli, devices) normalization;
    ``None`` takes the largest node of each snapshot. ``max_reserved_gangs``: how many aged
    gangs may hold nodes per cycle. ``membw_*`` are the ``membw`` policy's
    (``policy.membw``); ``membw_trials`` plans trial co-runs (the simulator; live
    cycles with ``policy.membw.trials``, :mod:`coshare.ledger.trials`). ``monitor_fraction``,
    ``max_harvest_cores`` and ``copy_bw_limit_mbps`` are ``collocate``'s ``P_M``, ``P_B``
    and copy-bandwidth threshold (the ``collocate`` config section). ``sns_profiles`` are
    the program profiles of ``sns`` (the store of ``policy.sns.profiles_dir``, with
    the profiles learned from normal runs), ``sns_explore`` the programs whose learning runs
    go on (program -> the scale the next run tries alone, :mod:`coshare.profiles.learning`),
    ``sns_default_alpha``, ``sns_ways_weight`` and ``sns_mba`` its ``policy.sns`` settings.
    ``priority_band`` is the knapsack's band of priorities (``policy.priority_band``).
    """

    def __init__(
        self,
        *,
        threads: ThreadMode = "strict",
        seed: int = 0,
        age_limit_s: float | None = 3600.0,
        max_reserved_devices: int = 8,
        memory_grid_mib: int = 64,
        max_thread_cells: int = 64,
        max_memory_cells: int = MAX_MEMORY_CELLS,
        max_dp_cells: int = MAX_DP_CELLS,
        fgd_workload: tuple[tuple[Shape, int], ...] | None = None,
        bestfit_scale: tuple[int, int] | None = None,
        workload: tuple[tuple[WorkloadShape, int], ...] | None = None,
        max_reserved_gangs: int = 1,
        membw_max_share: float = 0.9,
        membw_programs: Mapping[str, float] | None = None,
        membw_init_s: float = 60.0,
        membw_trials: bool = False,
        monitor_fraction: float = DEFAULT_MONITOR_FRACTION,
        max_harvest_cores: int = DEFAULT_MAX_HARVEST_CORES,
        copy_bw_limit_mbps: float = DEFAULT_COPY_BW_LIMIT_MBPS,
        sns_profiles: Mapping[str, Profile] | None = None,
        sns_explore: Mapping[str, int] | None = None,
        sns_default_alpha: float = DEFAULT_ALPHA,
        sns_ways_weight: float = DEFAULT_WAYS_WEIGHT,
        sns_mba: bool = False,
        priority_band: float = 0.0,
    ) -> None:
        self.threads: ThreadMode = threads
        self.seed = seed
        self.age_limit_s = age_limit_s
        self.max_reserved_devices = max_reserved_devices
        self.memory_grid_mib = memory_grid_mib
        self.max_thread_cells = max_thread_cells
        self.max_memory_cells = max_memory_cells
        self.max_dp_cells = max_dp_cells
        self.fgd_workload = fgd_workload
        self.bestfit_scale = bestfit_scale
        self.workload = workload
        self.max_reserved_gangs = max_reserved_gangs
        self.membw_max_share = membw_max_share
        self.membw_programs: Mapping[str, float] = dict(membw_programs or {})
        self.membw_init_s = membw_init_s
        self.membw_trials = membw_trials
        self.monitor_fraction = monitor_fraction
        self.max_harvest_cores = max_harvest_cores
        self.copy_bw_limit_mbps = copy_bw_limit_mbps
        self.sns_profiles: Mapping[str, Profile] = dict(sns_profiles or {})
        self.sns_explore: Mapping[str, int] = dict(sns_explore or {})
        self.sns_default_alpha = sns_default_alpha
        self.sns_ways_weight = sns_ways_weight
        self.sns_mba = sns_mba
        self.priority_band = priority_band


def _table_options(o: PolicyOptions) -> dict[str, Any]:
    """The options of the policies that solve knapsack tables (knapsack, sharepack)."""
    return {
        "threads": o.threads,
        "memory_grid_mib": o.memory_grid_mib,
        "max_thread_cells": o.max_thread_cells,
        "age_limit_s": o.age_limit_s,
        "max_reserved_devices": o.max_reserved_devices,
        "max_memory_cells": o.max_memory_cells,
        "max_dp_cells": o.max_dp_cells,
        "priority_band": o.priority_band,
    }


FACTORIES: dict[str, Callable[[PolicyOptions], Policy]] = {
    "exclusive": lambda o: ExclusivePolicy(),
    "random": lambda o: RandomPolicy(seed=o.seed, threads=o.threads),
    "knapsack": lambda o: KnapsackPolicy(**_table_options(o)),
    "bestfit": lambda o: BestFitPolicy(threads=o.threads, scale=o.bestfit_scale),
    "fgd": lambda o: FgdPolicy(threads=o.threads, workload=o.fgd_workload),
    "sharepack": lambda o: SharePackPolicy(**_table_options(o), workload=o.workload),
    "membw": lambda o: MembwPolicy(
        max_share=o.membw_max_share,
        programs=o.membw_programs,
        init_s=o.membw_init_s,
        trials=o.membw_trials,
        threads=o.threads,
    ),
    "collocate": lambda o: CollocatePolicy(
        o.monitor_fraction, o.max_harvest_cores, o.copy_bw_limit_mbps
    ),
    "sns": lambda o: SnsPolicy(
        o.sns_profiles,
        "sns",
        o.sns_default_alpha,
        o.sns_ways_weight,
        o.age_limit_s,
        o.sns_mba,
        o.sns_explore,
    ),
    "cs": lambda o: SnsPolicy({}, "cs", o.sns_default_alpha, o.sns_ways_weight, o.age_limit_s),
}


#: Policies whose own admission or reservation the shared gang mechanism would bypass: they
#: refuse gangs (``unsupported``) and plan the other jobs as before.
GANGS_UNSUPPORTED: dict[str, str] = {
    "membw": "the membw policy does not place multi-node jobs yet (its bandwidth admission "
    "is per node and would not see a gang's other parts)",
    "collocate": "the collocate policy does not place multi-node jobs yet (its EASY "
    "reservation would not see the gang mechanism's)",
}


#: The policy a cycle uses unless the configuration names another.
DEFAULT_POLICY = "sharepack"


def policy_names() -> list[str]:
    """The names :func:`make_policy` accepts."""
    return sorted(FACTORIES)


def make_policy(name: str, options: PolicyOptions | None = None) -> Policy:
    """Build a policy by name.

    Raises:
        PolicyError: for an unknown name, listing the known ones.
    """
    factory = FACTORIES.get(name)
    if factory is None:
        # The name may come from a flag, a config or COSHARE_POLICY: shown bounded.
        raise PolicyError(unknown_name("policy", name, policy_names()))
    options = options or PolicyOptions()
    # Gangs (multi-node jobs) are placed by one mechanism around every policy.
    return GangPlanner(
        factory(options),
        whole_nodes=name == "exclusive",
        strict_threads=name == "exclusive" or options.threads == "strict",
        age_limit_s=options.age_limit_s,
        max_reserved_gangs=options.max_reserved_gangs,
        refuse_gangs=GANGS_UNSUPPORTED.get(name),
    )
