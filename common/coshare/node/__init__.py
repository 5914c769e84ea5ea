"""Node helpers: enforce on each node what the planner promised (the paper's COSMIC, IV-D2).

- :mod:`.cgroups` (:mod:`.cgroups.v1`, :mod:`.cgroups.v2`): a group per job, its own CPUs,
  a memory limit, freeze/thaw, kill as a whole, cleanup.
- :mod:`.spec`: a job's inputs, checked; CPU lists and core choice (pure).
- :mod:`.jobs`: job records in the state directory; pid -> job through the cgroup.
- :mod:`.lifecycle`: ``job-start`` / ``job-exec`` / ``job-end``, the adapters' entry point.
- :mod:`.protocol` (pure), :mod:`.gate_state` (pure), :mod:`.gate_server`,
  :mod:`.gate_client`: the offload gate that keeps device threads from being oversubscribed.
- :mod:`.watchdog`, :mod:`.nvml`: a job over its declared memory is killed, with a reason.
- :mod:`.daemon`: ``coshare node gate`` (gate and watchdog); :mod:`.cli`: the commands.
"""
