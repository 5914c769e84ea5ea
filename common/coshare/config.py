"""Configuration: a YAML file loaded into frozen dataclasses.

Precedence, lowest first: the defaults below < the YAML file < ``COSHARE_<SECTION>_<KEY>``
environment variables < command-line flags (applied by the CLI with :func:`with_overrides`).
The file is found at ``--config PATH``, else ``$COSHARE_CONFIG``, else
``/etc/coshare/config.yaml`` when it exists; nothing is read at import time.

Unknown keys are errors that list the valid keys; values are checked for type and range.
One generic loader (:func:`build`) reads every section, so a new section is one more
dataclass field on :class:`Config`.

Example (also ``coshare config show``)::

    device_kinds:
      phi-5110p: {memory_mib: 8192, threads: 240}
    policy:
      name: sharepack       # exclusive | random | knapsack | bestfit | fgd | sharepack
      threads: strict       # strict: declared threads per device never exceed T; soft: may
      seed: 0
      age_limit_s: 3600     # jobs older than this are placed first (null: never)
    knapsack:
      memory_grid_mib: 64
    node:
      devices: {"0": 240}   # offload gate: hardware threads per device
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

from coshare.errors import ConfigError
from coshare.model import ThreadMode

C = TypeVar("C")

DEFAULT_CONFIG_PATH = Path("/etc/coshare/config.yaml")
ENV_PREFIX = "COSHARE_"


@dataclass(frozen=True)
class DeviceKind:
    """Limits of one kind of device, for nodes whose scheduler does not advertise them.

    Attributes:
        memory_mib: device memory.
        threads: hardware threads.
    """

    memory_mib: int = field(metadata={"min": 1})
    threads: int = field(metadata={"min": 1})


def _default_device_kinds() -> Mapping[str, DeviceKind]:
    return {
        # Intel Xeon Phi 5110P: 60 cores x 4 hardware threads, 8 GB (the paper's cluster).
        "phi-5110p": DeviceKind(memory_mib=8192, threads=240),
        # NVIDIA GPUs: threads = SMs x 2048 resident threads.
        "v100-16g": DeviceKind(memory_mib=16384, threads=80 * 2048),
        "a100-40g": DeviceKind(memory_mib=40960, threads=108 * 2048),
        "h100-80g": DeviceKind(memory_mib=81559, threads=132 * 2048),
    }


@dataclass(frozen=True)
class PolicyConfig:
    """Options shared by the policies.

    Attributes:
        name: the policy the cycle uses.
        threads: ``strict`` keeps the declared threads of the jobs on a device within its
            hardware threads; ``soft`` lets them exceed it where the node's offload gate
            serializes offloads (the paper's COSMIC).
        seed: seed of the ``random`` policy (and of any tie-breaking that needs one).
        age_limit_s: a job pending longer than this is placed before any other, and a device
            is held back for it if it fits none now; ``null`` disables aging.
        max_reserved_devices: at most this many devices are held back per cycle for aged jobs.
    """

    name: str = "sharepack"
    threads: ThreadMode = "strict"
    seed: int = 0
    age_limit_s: float | None = field(default=3600.0, metadata={"min": 0})
    max_reserved_devices: int = field(default=8, metadata={"min": 0})


@dataclass(frozen=True)
class KnapsackConfig:
    """Options of the knapsack policy.

    Attributes:
        memory_grid_mib: the dynamic program's memory step; job memory is rounded *up* to it and
            free device memory *down*, so a plan never under-reserves. Smaller is tighter and
            slower (cost grows with device memory / grid).
        max_thread_cells: the thread dimension of the dynamic program has at most this many
            cells; when declared thread counts share no common step that fits, they are
            rounded up to ``threads / max_thread_cells``.
        max_memory_cells: the memory dimension has at most this many cells: on larger devices
            the step grows, so a fine ``memory_grid_mib`` never costs more (the plan then
            notes the table the finer step would have needed).
        max_dp_cells: one device's table has at most this many rows x cells (its time, and
            its bytes of choices); beyond it, dominated job sizes are dropped and the memory
            step coarsened for that device, and the plan notes it.
    """

    memory_grid_mib: int = field(default=64, metadata={"min": 1})
    max_thread_cells: int = field(default=64, metadata={"min": 1})
    max_memory_cells: int = field(default=2048, metadata={"min": 1})
    max_dp_cells: int = field(default=1 << 22, metadata={"min": 1})


@dataclass(frozen=True)
class CycleConfig:
    """Options of the live planning cycle (both adapters).

    Attributes:
        replan_after_s: a job planned this long ago that has not started is planned again
            (its device may have been taken by something coshare does not manage).
        interval_s: how often the deploy files run a cycle (systemd timer, cron).
    """

    replan_after_s: float = field(default=300.0, metadata={"min": 0})
    interval_s: float = field(default=30.0, metadata={"min": 1})


def _default_node_devices() -> Mapping[str, int]:
    return {}


@dataclass(frozen=True)
class NodeConfig:
    """Options of the node helpers (``coshare node ...``, :mod:`coshare.node`).

    Attributes:
        cgroup_root: where the cgroup file systems are mounted (v2: the cgroup2 mount; v1: the
            directory holding one mount per controller).
        cgroup_version: ``auto`` uses v2 when ``cgroup_root`` is a cgroup2 mount, else v1.
        cgroup_parent: the coshare-owned group under which each job gets its own group.
        state_dir: job records, kill reasons and the allocation lock live here.
        gate_socket: the offload gate's unix socket.
        devices: the hardware threads of each device the gate manages (device id -> threads).
        watch_interval_s: how often the watchdog checks memory use.
        device_memory: ``nvml`` enforces declared device memory with NVML (GPUs; needs the
            ``nvml`` extra); ``none`` does not watch device memory.
        device_env: variables set to the job's device ids (comma-separated) by ``job-exec``.
        kill_timeout_s: how long freezing, killing and removing a job's group may take.
        control_socket: the node daemon's job-control socket (START, JOIN, END), where job
            wrappers that run as the job's user ask the root daemon to set up and end the
            job's group (:mod:`coshare.node.control`).
        trusted_launchers: programs whose children may START a job (HTCondor's
            ``condor_starter``, Slurm's ``slurmstepd``, installed as ``slurmstepd-wlm`` by
            Debian and Ubuntu): a bare name matches the basename of the program's executable,
            an absolute path the whole executable path.
        trusted_launcher_uids: accounts a trusted launcher must run as (its real uid): 0 where
            the scheduler's daemons run as root; add the condor account of a pool whose
            daemons run unprivileged.
        cpu_overcommit: how many jobs may hold one CPU. 1 (the default): every job gets CPUs
            of its own, and a job is refused when too few are free. More is for test rigs
            that run several fake nodes, each advertising more cores than the host has, on
            one host: jobs then get the least-held CPUs, still their own while enough are free.
    """

    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_version: Literal["auto", "v1", "v2"] = "auto"
    cgroup_parent: str = "coshare"
    state_dir: str = "/run/coshare"
    gate_socket: str = "/run/coshare/gate.sock"
    devices: Mapping[str, int] = field(default_factory=_default_node_devices)
    watch_interval_s: float = field(default=1.0, metadata={"min": 0.01})
    device_memory: Literal["none", "nvml"] = "none"
    device_env: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
    kill_timeout_s: float = field(default=10.0, metadata={"min": 0.1})
    control_socket: str = "/run/coshare/control.sock"
    trusted_launchers: tuple[str, ...] = ("condor_starter", "slurmstepd", "slurmstepd-wlm")
    trusted_launcher_uids: tuple[int, ...] = (0,)
    cpu_overcommit: int = field(default=1, metadata={"min": 1})


@dataclass(frozen=True)
class CondorConfig:
    """Options of the HTCondor adapter (``coshare condor ...``).

    Attributes:
        condor_config: HTCondor configuration file the bindings read (sets ``CONDOR_CONFIG``);
            ``null``: the bindings' usual lookup (``$CONDOR_CONFIG``, ``/etc/condor``).
        collector: ``host:port`` of the collector; ``null``: ``COLLECTOR_HOST`` of that config.
        schedd: name of the schedd whose jobs are planned; ``null``: the local schedd, or the
            only one the collector knows.
        hold_invalid: hold an annotated job whose annotations are unusable, with the message
            as its hold reason; ``false``: leave it idle and only report it.
        retries: attempts of a read (and of a write that failed to connect) before giving up.
        retry_wait_s: seconds between attempts.
    """

    condor_config: str | None = None
    collector: str | None = None
    schedd: str | None = None
    hold_invalid: bool = True
    retries: int = field(default=3, metadata={"min": 1})
    retry_wait_s: float = field(default=1.0, metadata={"min": 0})


@dataclass(frozen=True)
class SlurmConfig:
    """Options of the Slurm adapter (``coshare slurm ...``).

    Attributes:
        conf: slurm.conf the Slurm commands use (exported as ``SLURM_CONF``); ``null`` keeps
            the environment's (normally /etc/slurm/slurm.conf).
        bin_dir: directory of squeue, sinfo and scontrol; ``null`` searches ``PATH``.
        partition: plan only the nodes and jobs of this partition; annotated jobs of other
            partitions are refused with a message. ``null``: every node and job.
        gres_name: the GRES whose devices coshare shares (``gpu``); each device's memory and
            threads come from ``device_kinds`` by its GRES type (``gpu:phi5110p:2``).
        command_timeout_s: limit of each Slurm command.
        retry_attempts: tries of a command that failed because the controller was
            unreachable (tenacity, exponential wait).
        retry_wait_s: first wait between tries; it doubles up to 8 times this.
        update_batch: placements written per scontrol process (commands on its stdin).
        workers: scontrol processes writing at the same time.
        lock_file: a cycle takes this lock so overlapping cycles (cron) never interleave;
            ``null``: no lock.
    """

    conf: str | None = None
    bin_dir: str | None = None
    partition: str | None = None
    gres_name: str = "gpu"
    command_timeout_s: float = field(default=30.0, metadata={"min": 0.1})
    retry_attempts: int = field(default=3, metadata={"min": 1})
    retry_wait_s: float = field(default=1.0, metadata={"min": 0})
    update_batch: int = field(default=250, metadata={"min": 1})
    workers: int = field(default=4, metadata={"min": 1})
    lock_file: str | None = "/run/lock/coshare-slurm-cycle.lock"


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    device_kinds: Mapping[str, DeviceKind] = field(default_factory=_default_device_kinds)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    knapsack: KnapsackConfig = field(default_factory=KnapsackConfig)
    cycle: CycleConfig = field(default_factory=CycleConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    condor: CondorConfig = field(default_factory=CondorConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


def build(cls: type[C], data: object, where: str = "") -> C:
    """Build dataclass ``cls`` from a mapping, checking keys, types and ranges.

    Missing keys take the field's default.

    Raises:
        ConfigError: naming the key path, the bad value and what is allowed.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(
            f"{where or 'config'}: unknown key {unknown[0]!r} "
            f"(valid keys: {', '.join(sorted(fields))})"
        )
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else name
        values[name] = _convert(hints[name], value, path)
        minimum = fields[name].metadata.get("min")
        if minimum is not None and values[name] is not None and values[name] < minimum:
            raise ConfigError(f"{path}: {value!r} is below the minimum {minimum}")
    missing = [
        n
        for n, f in fields.items()
        if n not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where or 'config'}: missing key {missing[0]!r}")
    return cls(**values)


def _convert(hint: Any, value: object, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (Mapping, dict, typing.Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        value_type = args[1]
        return {str(k): _convert(value_type, v, f"{path}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, path)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{path}: unsupported setting type {hint!r}")  # pragma: no cover


def to_dict(obj: object) -> Any:
    """A plain-data view of a config (for ``coshare config show``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Read ``COSHARE_<SECTION>_<KEY>`` variables into a nested mapping.

    Values are parsed as YAML scalars (``3600``, ``null``, ``soft``). Sections whose values are
    mappings of their own (``device_kinds``) are set in the file only.

    Raises:
        ConfigError: for a ``COSHARE_`` variable that names no setting.
    """
    sections = {
        f.name: f
        for f in dataclasses.fields(Config)
        if dataclasses.is_dataclass(typing.get_type_hints(Config)[f.name])
    }
    out: dict[str, dict[str, Any]] = {}
    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX) or var == "COSHARE_CONFIG":
            continue
        rest = var[len(ENV_PREFIX) :].lower()
        for section in sorted(sections, key=len, reverse=True):
            if rest.startswith(section + "_"):
                key = rest[len(section) + 1 :]
                out.setdefault(section, {})[key] = yaml.safe_load(text)
                break
        else:
            valid = ", ".join(f"COSHARE_{s.upper()}_<KEY>" for s in sorted(sections))
            raise ConfigError(f"environment variable {var} names no setting (valid: {valid})")
    return out


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Load the configuration: defaults < file < environment.

    Args:
        path: the YAML file; ``None`` looks at ``$COSHARE_CONFIG`` then
            ``/etc/coshare/config.yaml`` (absent is fine: defaults).
        environ: the environment (``os.environ`` when ``None``).

    Raises:
        ConfigError: for an unreadable file, bad YAML, unknown keys or bad values.
    """
    environ = os.environ if environ is None else environ
    explicit = path is not None or "COSHARE_CONFIG" in environ
    if path is None:
        path = Path(environ["COSHARE_CONFIG"]) if "COSHARE_CONFIG" in environ else None
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = path.read_text()
        except OSError as exc:
            if explicit:
                raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
            text = ""
        try:
            loaded = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: expected a mapping of sections, got {loaded!r}")
        data = dict(loaded)
    data = _merge(data, env_overrides(environ))
    where = str(path) if path is not None else "config"
    try:
        return build(Config, data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def with_overrides(config: Config, section: str, **values: Any) -> Config:
    """Apply command-line overrides (``None`` values are ignored) to one section."""
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return config
    current = to_dict(getattr(config, section))
    hint = typing.get_type_hints(Config)[section]
    return dataclasses.replace(config, **{section: build(hint, _merge(current, given), section)})
