# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""``nova-numa-overhead status``: what the agent sees on this host.

Runs the agent's own code (:class:`~nova_numa_overhead.compute.agent.Agent`
over the libvirt backend) for a few sampling cycles and prints, per node,
the overhead levels, memory and guests; per node pair, the interconnect and
remote-latency levels; per guest, where its memory is, where the placer
would put it and what the rebalancer would move next.

Next to every level it shows the raw value the level was classified from
(LLC contention, cycle loss, local/remote ratio) and the thresholds, so an
operator can tune them under a known load.

It changes nothing but the perf events it needs to measure: enforcement is
forced to ``advisory``, the hypervisor is wrapped so that every other
changing call is refused, and the report is kept, not sent. Guests whose
perf events are off get them for the sampling time and lose them again
afterwards (``--no-perf-events`` leaves them alone).
"""

import argparse
import contextlib
import json
import logging
import math
import socket
import sys
import textwrap
import time

from oslo_config import cfg

from nova_numa_overhead.cmd import common
from nova_numa_overhead.compute import hypervisor as hv_mod

PROG = 'nova-numa-overhead status'
WIDTH = 80
EXIT_ERROR = common.EXIT_ERROR
EXIT_CONFIG = common.EXIT_USAGE
#: Longest sampling time accepted (seconds).
MAX_SAMPLE = 3600


class ConfigError(Exception):
    """The configuration cannot be used; the message names the option."""


def sample_count(seconds: float, interval: float) -> int:
    """Counter reads for ``seconds`` of sampling every ``interval``."""
    if interval <= 0 or seconds <= 0:
        return 2
    return max(2, int(math.floor(seconds / interval + 1e-9)) + 1)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``status`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        'status',
        help='show the overhead levels, memory and guests of this compute '
             'host, and what the agent would move next (changes nothing)',
        description='Measure this host with the agent\'s code for a few '
                    'samples and show what the agent sees and would do. '
                    'Nothing is changed: enforcement is forced to '
                    'advisory.')
    parser.add_argument(
        '--connect', metavar='URI', default=None,
        help='libvirt URI (default: [numa_overhead_agent] connection_uri '
             'of the --config-file, else qemu:///system)')
    parser.add_argument(
        '--config-file', metavar='PATH', action='append', default=None,
        help='nova.conf to read thresholds and policies from (repeatable; '
             'default: oslo.config\'s search for nova.conf, e.g. '
             '/etc/nova/nova.conf, as the agent)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table', help='output format (default: '
                                              'table)')
    parser.add_argument('--sample', type=common.seconds(MAX_SAMPLE),
                        default=1.0, metavar='SECONDS',
                        help='measure for this long and show the means '
                             '(default: 1; at most %d)' % MAX_SAMPLE)
    parser.add_argument('--interval', type=common.seconds(MAX_SAMPLE),
                        default=1.0, metavar='SECONDS',
                        help='seconds between two counter reads (default: '
                             '1.0; 0 reads twice at once)')
    parser.add_argument('--no-perf-events', dest='perf_events',
                        action='store_false',
                        help='do not enable perf events on guests that '
                             'have them off (their counters then read '
                             'nothing)')
    parser.add_argument('--debug', action='store_true',
                        help='log what the agent code does on stderr')
    parser.set_defaults(func=run)
    return parser


class _KeptPublisher:
    """Keeps the agent's report instead of sending it."""

    def __init__(self):
        self.report = None

    def publish(self, report) -> bool:
        self.report = report
        return True


class ReadOnlyHypervisor(hv_mod.Hypervisor):
    """A hypervisor that reads through and refuses every change.

    With ``perf_events`` it enables the perf events of guests that have
    them off, remembers them and turns them off again in :meth:`close`:
    the only change ``status`` makes, for the time it samples.
    """

    def __init__(self, hypervisor: hv_mod.Hypervisor,
                 perf_events: bool = False, clock=time.monotonic):
        self.hv = hypervisor
        self.clock = clock
        # Domain name -> [(time, counters) of the first read, of the last].
        self.reads = {}
        self.last_error = None
        self.perf_events = perf_events
        # Domain name -> what happened to its perf events.
        self.perf = {}
        self._enabled = []
        # Memory-bandwidth reads (resctrl): the guests the last one
        # answered for, and why the last one failed.
        self.monitored = set()
        self.bandwidth_error = None

    def _read(self, func, *args):
        try:
            return func(*args)
        except hv_mod.HypervisorUnavailable as exc:
            self.last_error = exc
            raise

    def topology(self):
        return self._read(self.hv.topology)

    def free_memory_mb(self):
        return self._read(self.hv.free_memory_mb)

    def domains(self):
        return self._read(self.hv.domains)

    def counters(self, domains):
        values = self._read(self.hv.counters, domains)
        now = self.clock()
        for name, counters in values.items():
            self.reads.setdefault(name, [(now, counters)])[1:] = [
                (now, counters)]
        return values

    def instructions_per_second(self, name: str) -> float | None:
        """Mean instructions per second of a guest over the sampling."""
        reads = self.reads.get(name, ())
        if len(reads) < 2 or reads[-1][0] <= reads[0][0]:
            return None
        (t0, first), (t1, last) = reads[0], reads[-1]
        done = last.instructions - first.instructions
        return done / (t1 - t0) if done >= 0 else None

    def memory_bandwidth(self, domains):
        """Read through, remembering which guests have a monitor."""
        read = getattr(self.hv, 'memory_bandwidth', None)
        answer = {}
        try:
            if read is not None:
                answer = read(domains)
        except Exception as exc:
            self.monitored = set()
            self.bandwidth_error = common.one_line(str(exc)) or \
                type(exc).__name__
            raise
        self.bandwidth_error = None
        self.monitored = set(answer) if isinstance(answer, dict) else set()
        return answer

    def vcpu_cpus(self, domain):
        return self._read(self.hv.vcpu_cpus, domain)

    def vcpu_affinity(self, domain):
        return self._read(self.hv.vcpu_affinity, domain)

    def kernel_state(self):
        return self._read(self.hv.kernel_state)

    def memory_per_node(self, domain):
        return self._read(self.hv.memory_per_node, domain)

    def enable_counters(self, domain):
        """Enable perf events that are off, for the sampling time."""
        if not self.perf_events:
            self.perf[domain.name] = 'left alone (--no-perf-events)'
            return False
        try:
            already = self.hv.counters_enabled(domain)
            if already is None:
                self.perf[domain.name] = 'state unknown: left alone'
                return False
            if already:
                self.perf[domain.name] = 'already on'
                return True
            if self.hv.enable_counters(domain):
                self._enabled.append(domain)
                self.perf[domain.name] = 'enabled while sampling'
                return True
            why = self.hv.counters_error or 'refused'
        except hv_mod.HypervisorUnavailable:
            raise
        except hv_mod.HypervisorError as exc:
            why = str(exc)
        self.perf[domain.name] = 'cannot enable: %s' % why
        return False

    def restore_counters(self) -> list:
        """Turn off what :meth:`enable_counters` turned on.

        :returns: messages for the guests whose events stayed on.
        """
        failed = []
        enabled, self._enabled = self._enabled, []
        for domain in enabled:
            try:
                self.hv.disable_counters(domain)
            except hv_mod.DomainGone:
                continue
            except hv_mod.HypervisorError as exc:
                failed.append('%s: %s' % (domain.name, exc))
        return failed

    def _refuse(self, what):
        raise hv_mod.HypervisorError('status is read-only: refusing to %s'
                                     % what)

    def set_nodeset(self, domain, nodes):
        self._refuse('change the nodeset of %s' % domain.name)

    def move_pages(self, domain, moves, max_pages):
        self._refuse('move pages of %s' % domain.name)

    def pin_vcpus(self, domain, cpus):
        self._refuse('pin the vCPUs of %s' % domain.name)

    def close(self):
        self.hv.close()


class _AdvisoryOpts:
    """``[numa_overhead_agent]`` with enforcement forced to advisory, and
    a window that holds every sample taken.
    """

    enforcement = 'advisory'

    def __init__(self, opts, samples=0):
        self._opts = opts
        self.window_size = max(opts.window_size, samples)

    def __getattr__(self, name):
        return getattr(self._opts, name)


class _AdvisoryConf:
    """A read-only view of the configuration for the agent code.

    Not ``set_override``: oslo.config would keep the override in option
    state that other ConfigOpts of the process can share.
    """

    def __init__(self, conf, samples=0):
        self._conf = conf
        self.numa_overhead_agent = _AdvisoryOpts(conf.numa_overhead_agent,
                                                 samples)

    def __getattr__(self, name):
        return getattr(self._conf, name)


def load_conf(files) -> cfg.ConfigOpts:
    """The agent's options from ``files``, validated.

    ``files`` None: oslo.config's search for nova.conf (~/.nova/nova.conf,
    /etc/nova/nova.conf, ...) and the agent's own files, as the agent
    started without ``--config-file`` reads them.

    :raises ConfigError: naming the file or option.
    """
    from nova_numa_overhead.cmd import agent as agent_cmd
    from nova_numa_overhead.conf import opts as conf_opts

    def parse(default_files, default_dirs):
        conf = cfg.ConfigOpts()
        # Registered by group name: each ConfigOpts then has option state
        # of its own (the modules' OptGroup objects would share it).
        for group, opts in conf_opts.list_opts():
            conf.register_opts(opts, group=group.name)
        conf.register_opt(cfg.StrOpt('host', default=socket.gethostname()))
        argv = []
        for path in files or ():
            argv.extend(['--config-file', path])
        conf(argv, project='nova', prog=PROG,
             default_config_files=default_files,
             default_config_dirs=default_dirs)
        return conf

    try:
        try:
            conf = parse(*(
                ([], []) if files is not None else
                (cfg.find_config_files('nova', agent_cmd.PROG),
                 cfg.find_config_dirs('nova', agent_cmd.PROG))))
        except cfg.ConfigFilesPermissionDeniedError as exc:
            if files is not None:
                raise
            # nova.conf is often readable by nova alone: what a user
            # without it can see, said so.
            print('%s: warning: %s: built-in defaults used (run it as the '
                  'agent\'s user, or give --config-file)' % (PROG, exc),
                  file=sys.stderr)
            conf = parse([], [])
        agent_cmd.validate(conf)
    except (cfg.Error, ValueError) as exc:
        raise ConfigError(str(exc))
    return conf


@contextlib.contextmanager
def _logging(debug: bool):
    """Keep the agent code's log lines off the terminal (unless debug)."""
    logger = logging.getLogger('nova_numa_overhead')
    level = logger.level
    handler = None
    if debug:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            '%(levelname)s %(name)s: %(message)s'))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)
        if handler is not None:
            logger.removeHandler(handler)


def _host(conf) -> str:
    """nova-compute's ``[DEFAULT] host``, the name schedulers know."""
    return getattr(conf, 'host', None) or socket.gethostname()


def collect(conf, uri: str, samples: int = 2, interval: float = 1.0,
            hypervisor=None, sleep=time.sleep, clock=time.monotonic,
            perf_events: bool = True) -> dict:
    """Run the agent's cycles on ``uri`` and return what it saw.

    ``samples`` counter reads ``interval`` seconds apart; the levels and
    raw values are the means over all of them.

    :raises HypervisorError: when the host cannot be read.
    """
    from nova_numa_overhead.compute import agent as agent_mod
    configured = conf.numa_overhead_agent.enforcement
    conf = _AdvisoryConf(conf, samples)
    if hypervisor is None:
        from nova_numa_overhead.compute import libvirt_driver
        hypervisor = libvirt_driver.LibvirtHypervisor(uri)
    hv = ReadOnlyHypervisor(hypervisor, perf_events=perf_events,
                            clock=clock)
    try:
        # Fails fast (no reconnect loop) when libvirt is unreachable.
        hv.topology()
        publisher = _KeptPublisher()
        agent = agent_mod.Agent(conf, hv, publisher, _host(conf),
                                clock=clock, sleep=lambda seconds: None)
        try:
            for i in range(samples):
                if i:
                    sleep(interval)
                if not agent.cycle():
                    raise hv_mod.HypervisorUnavailable(
                        str(hv.last_error or
                            'lost the connection to %s' % uri))
        finally:
            left_on = hv.restore_counters()
        decisions = {}
        for name, domain in sorted(agent.domains.items()):
            decision = agent.place(domain)
            if decision is not None:
                decisions[name] = decision
        moves = agent.rebalance()
        return _status(conf, agent, uri, samples, interval, decisions,
                       moves, publisher.report, configured, hv, left_on)
    finally:
        hv.close()


def _per_node(mapping: dict, size: int) -> list:
    result = [0] * size
    for node, value in (mapping or {}).items():
        if 0 <= node < size:
            result[node] = value
    return result


def _rounded(value, digits=3):
    return None if value is None else round(value, digits)


def _bandwidth(rates: dict | None, size: int) -> list | None:
    """[[local, total] bytes/s] per node, or None when not measured."""
    if rates is None:
        return None
    result = [[0, 0] for _ in range(size)]
    for node, (local, total) in rates.items():
        if 0 <= node < size:
            result[node] = [round(local), round(total)]
    return result


def _sources(agent, hv) -> dict:
    """Which counter sources this host has, and for how many guests."""
    topology = agent.topology
    perf = llc = stalls = measured = 0
    for name in agent.domains:
        state = agent.collector.guests.get(name)
        if state is None:
            continue
        if state.delta is not None:
            perf += 1
            llc += state.delta[2] > 0
        mean = agent.collector.windows.mean(name)
        stalls += bool(mean and mean.cycle_loss > 0)
        measured += state.bandwidth is not None
    monitored = len(hv.monitored & set(agent.domains))
    est = agent.estimator_topology
    latency, bandwidth = bool(est.latency_ns), bool(est.bandwidth_mbps)
    path = agent.opts.topology_file or None
    ignored = None
    if topology.latency_ns or topology.bandwidth_mbps:
        matrix, path = 'hypervisor', None
    elif latency or bandwidth:
        matrix = 'probe'
    else:
        matrix = 'slit'
        if path:
            ignored = _topology_file_problem(path, topology)
    return {
        'perf': {'available': perf > 0, 'guests': perf, 'llc_guests': llc},
        'stalled_cycles': {'available': stalls > 0, 'guests': stalls},
        'resctrl': {'available': monitored > 0, 'guests': monitored,
                    'measured_guests': measured,
                    'error': hv.bandwidth_error},
        # topology_file: the file configured (None with the hypervisor's
        # matrix, which the agent takes first); ignored: why the agent
        # keeps SLIT instead of it.
        'matrix': {'source': matrix, 'latency': latency,
                   'bandwidth': bandwidth, 'topology_file': path,
                   'ignored': ignored},
        # MiB of L3 cache per node from the capabilities' cache banks;
        # None where they list none (the cost model then assumes
        # LLC_VCPUS_PER_CORE working sets per core).
        'llc_mb': [None if node.llc_mb is None else round(node.llc_mb, 1)
                   for node in topology.nodes],
        'node_cpus': [len(node.cpus) for node in topology.nodes],
    }


def _topology_file_problem(path: str, topology) -> str:
    """Why the agent uses SLIT rather than ``topology_file`` ``path`` on
    this host: the file read again as the agent reads it.
    """
    from nova_numa_overhead.compute import probe
    cpu_less = [n.id for n in topology.nodes if not n.cpus]
    try:
        matrix = probe.load(path, nodes=[n.id for n in topology.nodes],
                            cpu_less=cpu_less)
        if matrix is None:
            return 'it does not exist'
        probe.as_topology_args(matrix, cpu_less)
    except OSError as exc:
        return exc.strerror or str(exc)
    except ValueError as exc:
        reason = common.one_line(exc)
        # The probe's messages start with the path, already named.
        prefix = '%s: ' % path
        return reason[len(prefix):] if reason.startswith(prefix) else reason
    return 'no matrix in it'


def _guest(conf, agent, name: str, decision, size: int, hv) -> dict:
    from nova_numa_overhead.compute import placer as placer_mod
    opts = conf.numa_overhead_agent
    domain = agent.domains[name]
    state = agent.collector.guests.get(name)
    policy, why = placer_mod.guest_policy(
        domain, opts.managed_guests, conf.numa_overhead.default_policy,
        conf.numa_overhead.default_max_nodes)
    kind = agent.collector.classify(
        name, available_mbps=opts.node_bandwidth_mbps,
        low=opts.llc_low_bound, high=opts.llc_high_bound)
    planned = decision is not None and decision.action == 'planned'
    mean = agent.collector.windows.mean(name)
    # The running agent's own account, from the guest's metadata.
    recorded = domain.recorded
    nodes, cpus = ((recorded.nodes, recorded.cpus) if recorded
                   else ((), ()))
    return {
        'name': name,
        'uuid': domain.uuid,
        'memory_mb': domain.memory_mb,
        'vcpus': domain.vcpus,
        'managed': policy is not None,
        'policy': policy.policy if policy else None,
        'max_nodes': policy.max_nodes if policy else None,
        'rebalance': bool(policy and policy.rebalance),
        'reason': why or (decision.reason if decision and not planned
                          else ''),
        'counters': bool(state and state.delta is not None),
        'perf_events': hv.perf.get(name),
        # Means over the sampling time: what the estimator was given.
        'llc_hit_rate': _rounded(mean and mean.llc_hit_rate),
        'cycle_loss': _rounded(mean and mean.cycle_loss),
        'ipc': _rounded(mean and mean.ipc),
        'instructions_per_s': _rounded(hv.instructions_per_second(name), 0),
        # resctrl: [local, total] bytes/s per node where its vCPUs ran,
        # over the last interval (None: no monitor, or one read only).
        'bandwidth_monitor': name in hv.monitored,
        'bandwidth_bps': _bandwidth(state.bandwidth if state else None,
                                    size),
        'workload': kind.action if kind else None,
        'memory_mb_per_node': _per_node(state.memory_mb if state else {},
                                        size),
        'cpu_per_node': [round(f, 3) for f in _per_node(
            state.cpu if state else {}, size)],
        'plan_mb_per_node': (_per_node(decision.plan, size) if planned
                             else None),
        'planned_overhead': decision.overhead if planned else None,
        'placement_moves': [
            {'from': src, 'to': dst, 'mb': mb}
            for src, dst, mb in (decision.moves if planned else [])],
        # What Nova allowed, the agent's restriction in force and the
        # nodes the guest may use now ([] = every node or CPU).
        'nova_nodes': list(agent.nova_allowed.get(name, ())),
        'nova_cpus': list(agent.nova_cpus.get(name, ())),
        'agent_nodes': list(nodes),
        'agent_cpus': list(cpus),
        'allowed_nodes': list(domain.allowed_nodes),
        'last_action': recorded.action if recorded else None,
        'last_outcome': recorded.outcome if recorded else None,
        'last_at': recorded.at if recorded else None,
        # The optimizer's moves of it on the recording host, and their
        # verdicts after its closed loop.
        'optimizer': {'moved': recorded.moved if recorded else 0,
                      'kept': recorded.kept if recorded else 0,
                      'undone': recorded.undone if recorded else 0,
                      # Until when it leaves the guest alone (UTC).
                      'left_alone_until':
                      recorded.backoff_until if recorded and
                      recorded.backoff_until else None},
        # Another host's record: the guest came by live migration.
        'recorded_on': recorded.host if recorded else None,
        'recorded_elsewhere': bool(recorded and recorded.host != agent.host),
    }


def _status(conf, agent, uri, samples, interval, decisions, moves,
            report, enforcement, hv, left_on=()) -> dict:
    from nova_numa_overhead.overhead import estimator
    opts = conf.numa_overhead_agent
    topology = agent.topology
    levels = agent.levels
    size = topology.size
    overhead = levels.overhead_matrix()
    # The raw values behind agent.levels: the same observations and code.
    inputs = estimator.measure(agent.collector.observations(),
                               agent.estimator_topology)
    free = list(agent.free_mb)
    guests = agent.guests_per_node()
    nodes = [{'id': node.id, 'cpus': len(node.cpus),
              'total_mb': node.memory_mb,
              'free_mb': free[i] if i < len(free) else None,
              'guests': guests[i], 'llc': levels.llc[i], 'mc': levels.mc[i],
              'llc_contention': _rounded(inputs.llc[i]),
              'mc_cycle_loss': _rounded(inputs.mc[i]),
              'overhead': overhead[i][i]}
             for i, node in enumerate(topology.nodes)]
    guest_list = [_guest(conf, agent, name, decisions.get(name), size, hv)
                  for name in sorted(agent.domains)]
    thresholds = agent.thresholds
    return {
        'host': agent.host,
        'uri': uri,
        'samples': samples,
        'interval': interval,
        'seconds': round(interval * (samples - 1), 3),
        'agent': {'enforcement': enforcement,
                  'managed_guests': opts.managed_guests,
                  'rebalance_interval': opts.rebalance_interval,
                  'rebalance_threshold': opts.rebalance_threshold},
        'thresholds': {'llc': list(thresholds.llc),
                       'mc': list(thresholds.mc),
                       'inter': list(thresholds.inter),
                       'rml': list(thresholds.rml)},
        'nodes': nodes,
        'inter': [list(r) for r in levels.inter],
        'rml': [list(r) for r in levels.rml],
        'inter_cycle_loss': [[_rounded(v) for v in r] for r in inputs.inter],
        'rml_ratio': [[_rounded(v) for v in r] for r in inputs.rml],
        'rml_source': [list(r) for r in inputs.rml_source],
        'overhead': [list(r) for r in overhead],
        'distances': [list(r) for r in topology.distances],
        'guests': guest_list,
        'rebalance_moves': [
            {'guest': m.guest, 'from': m.src, 'to': m.dst, 'mb': m.mb,
             'reason': m.reason} for m in moves],
        'report': report.to_dict() if report is not None else None,
        'sources': _sources(agent, hv),
        'kernel': _kernel(agent, enforcement),
        'optimizer': _optimizer(conf, enforcement, guest_list, agent.host,
                                topology, agent.estimator_topology),
        'notes': _notes(guest_list, left_on),
    }


def _kernel(agent, enforcement: str) -> dict | None:
    """The kernel's NUMA balancing and numad (None: unknown, a remote or
    simulated host, or a failed read), and whether an agent with the configured
    ``enforcement`` steps back here (numad runs).
    """
    state = agent.kernel
    if state is None:
        return None
    from nova_numa_overhead.compute import placer as placer_mod
    out = state.to_dict()
    out['text'] = state.text()
    out['steps_back'] = bool(state.numad) and enforcement in (
        placer_mod.NODESET, placer_mod.PAGES)
    return out


def _optimizer(conf, enforcement: str, guests: list, host: str,
               topology=None, matrix=None) -> dict:
    """The optimizer as the configuration given to ``status`` sets it
    (moves, advises or off), and the running agent's moves of the guests
    here now with their verdicts, from the guests' records.
    """
    opts = conf.numa_overhead_agent
    mine = [g for g in guests if g['recorded_on'] == host]
    from nova_numa_overhead.compute import placer as placer_mod
    if not opts.optimize or enforcement == placer_mod.OFF:
        mode = 'off'
    elif enforcement in (placer_mod.NODESET, placer_mod.PAGES):
        mode = 'moves'
    else:
        mode = 'advises'
    out = {'mode': mode}
    for key in ('moved', 'kept', 'undone'):
        out[key] = sum(g['optimizer'][key] for g in mine)
    out['guests'] = sum(1 for g in mine if g['optimizer']['moved'])
    out['model'] = _model_state(conf, host, topology, matrix)
    return out


def _model_state(conf, host, topology, matrix=None) -> dict:
    """What the agent last saved of the cost model's fit on this host
    (``[numa_overhead_agent] state_file``): its trust and the calibration
    of its recent verdicts, or why there is nothing to show.
    """
    from nova_numa_overhead.compute import model_state
    from nova_numa_overhead.compute import optimizer as opt_mod
    path = conf.numa_overhead_agent.state_file or ''
    out = {'file': path or None, 'saved_at': None, 'trust': None,
           'trust_now': None, 'calibration': None, 'error': None}
    if not path:
        return out
    try:
        data = model_state.load(path, opt_mod.TRUST_MIN)
    except model_state.StateError as exc:
        out['error'] = str(exc)
        return out
    except OSError as exc:
        out['error'] = 'cannot read %s: %s' % (path, exc)
        return out
    except Exception as exc:
        out['error'] = '%s: %s' % (path, exc)
        return out
    if data is None:
        return out
    if topology is not None:
        changed = model_state.differs(data, model_state.learned_for(
            conf, host, topology, matrix))
        unread = conf.numa_overhead_agent.topology_file and \
            not model_state.matrix_digest(matrix)
        if changed == ['matrix'] and unread:
            # This status read no matrix from the file (another user
            # than the agent's, say): it cannot tell.
            out['error'] = ('%s: learned with the matrix of topology_file '
                            '%s, which this status could not read: run it '
                            'as the agent\'s user to compare' % (
                                path, conf.numa_overhead_agent.topology_file))
            return out
        if changed:
            out['error'] = ('%s: learned for another %s; an agent started '
                            'now would start afresh' % (path, ', '.join(
                                model_state.FOR[k] for k in changed)))
            return out
    out['saved_at'] = data['saved_at'] or None
    out['trust'] = round(data['trust'], 3)
    # What it has recovered to since a verdict last taught it (the
    # agent's own figure while it runs; at its next start otherwise).
    out['trust_now'] = round(opt_mod.recovered(
        data['trust'], model_state.age(model_state.taught(data)) -
        opt_mod.TRUST_IDLE), 3)
    out['calibration'] = {
        kind: opt_mod.calibration_summary(pairs)
        for kind, pairs in data['predictions'].items()}
    return out


def _notes(guests: list, left_on) -> list:
    """What keeps the numbers from meaning much, in plain words."""
    notes = []
    perf = {}
    for guest in guests:
        if guest['perf_events']:
            perf.setdefault(guest['perf_events'], []).append(guest['name'])
    for state, names in sorted(perf.items()):
        if state.startswith('cannot enable'):
            notes.append('Perf events could not be enabled on %s (%s): '
                         'their LLC hit rate, cycle loss and IPC are '
                         'unknown.' % (_names(names),
                                       state[len('cannot enable: '):]))
    counted = [g for g in guests if g['counters']]
    on = [g['name'] for g in guests if not g['counters'] and
          g['perf_events'] in ('already on', 'enabled while sampling')]
    if on:
        notes.append('Perf events are on for %s but libvirt returned no '
                     'counter values (libvirt\'s test driver never does; '
                     'on a real host check kernel.perf_event_paranoid and '
                     'that the CPU exposes its PMU to the host).'
                     % _names(on))
    if guests and not counted:
        notes.append('No guest has hardware counters, so the LLC, MC and '
                     'INTER levels read 0 and RML comes from the node '
                     'distances only.')
    elif counted and not any(g['cycle_loss'] for g in counted):
        notes.append('Cycle loss reads 0 for every guest: this host\'s '
                     'perf events give no stalled-cycles-backend count, so '
                     'the MC and INTER levels stay 0.')
    if left_on:
        notes.append('Perf events could not be turned off again on %s.'
                     % '; '.join(left_on))
    return notes


def _names(names: list, most: int = 3) -> str:
    shown = ', '.join(names[:most])
    if len(names) > most:
        shown += ' and %d more' % (len(names) - most)
    return shown


# -- the table ---------------------------------------------------------------

def _wrap(text: str, indent: str = '', first: str | None = None) -> list:
    return textwrap.wrap(text, WIDTH, initial_indent=indent if first is None
                         else first, subsequent_indent=indent,
                         break_on_hyphens=False) or [indent.rstrip()]


def _matrix(title: str, rows: list, diagonal: str = '-') -> list:
    """A node x node matrix, its columns split to fit the width."""
    size = len(rows)
    cells = [[diagonal if i == j and diagonal else str(v)
              for j, v in enumerate(row)] for i, row in enumerate(rows)]
    width = max([3] + [len(c) for row in cells for c in row] +
                [len(str(size - 1))])
    label = max(4, len(str(size - 1)) + 2)
    per_line = max(1, (WIDTH - label) // (width + 1))
    lines = _wrap(title)
    for start in range(0, size, per_line):
        cols = range(start, min(size, start + per_line))
        lines.append(' ' * label + ''.join(
            ' %*d' % (width, j) for j in cols))
        for i in range(size):
            lines.append('%*d' % (label, i) + ''.join(
                ' %*s' % (width, cells[i][j]) for j in cols))
    return lines


def _nodes_text(values: list) -> str:
    used = ['%d:%s' % (n, v) for n, v in enumerate(values) if v]
    return '  '.join(used) or 'none'


def _value(value, digits=2) -> str:
    return '-' if value is None else '%.*f' % (digits, value)


def _pairs(levels: list, values: list, marks=None) -> list:
    """Cells ``level value`` of a pair matrix (``marks`` appended)."""
    return [['%d %s%s' % (level, _value(values[i][j]),
                          marks[i][j] if marks else '')
             for j, level in enumerate(row)]
            for i, row in enumerate(levels)]


def render(status: dict) -> str:
    """The status as text for an 80-column terminal."""
    agent = status['agent']
    nodes = status['nodes']
    lines = _wrap('Host %s via %s: %d NUMA nodes, %d guests, measured over '
                  '%g s (%d counter reads).' % (
                      status['host'], status['uri'], len(nodes),
                      len(status['guests']), status['seconds'],
                      status['samples']))
    lines += _wrap('Agent settings: enforcement %s, managed guests %s, '
                   'rebalancing every %d s above level %d. Nothing was '
                   'changed (perf events enabled for the sampling are off '
                   'again).' % (agent['enforcement'],
                                agent['managed_guests'],
                                agent['rebalance_interval'],
                                agent['rebalance_threshold']))
    thresholds = status['thresholds']
    lines += _wrap('Thresholds ([numa_overhead_agent] *_thresholds; a '
                   'level is how many of them the value reaches): %s.' % (
                       '; '.join('%s %s' % (name.upper(), ' '.join(
                           '%g' % t for t in thresholds[name]))
                           for name in ('llc', 'mc', 'inter', 'rml'))))
    lines += _wrap(_sources_text(status['sources']))
    lines += _wrap(_kernel_text(status.get('kernel'), agent['enforcement']))
    lines += _wrap(_optimizer_text(status['optimizer']))
    lines.append('')
    lines.append('NODE  CPUS  TOTAL MiB   FREE MiB  GUESTS  LLC  VALUE   '
                 'MC  VALUE  LOCAL')
    for node in nodes:
        free = '?' if node['free_mb'] is None else node['free_mb']
        lines.append('%4d  %4d  %9d  %9s  %6d  %3d  %5s  %3d  %5s  %5d' % (
            node['id'], node['cpus'], node['total_mb'], free,
            node['guests'], node['llc'], _value(node['llc_contention']),
            node['mc'], _value(node['mc_cycle_loss']), node['overhead']))
    lines += _wrap('LLC VALUE: 1 - LLC hit rate of the guests running on '
                   'the node; MC VALUE: highest cycle loss of guests running '
                   'there with memory there; -: no guest measured (level '
                   '0).')
    lines.append('')
    lines += _matrix('INTER, interconnect congestion: level and highest '
                     'cycle loss, CPU node (row) -> memory node (column):',
                     _pairs(status['inter'], status['inter_cycle_loss']))
    lines.append('')
    lines += _matrix('RML, remote-access latency: level and local/remote '
                     'ratio, from the guests\' IPC or, marked *, from the '
                     'node distances (or the probe\'s matrix):',
                     _pairs(status['rml'], status['rml_ratio'], [
                         ['*' if src == 'static' else '' for src in row]
                         for row in status['rml_source']]))
    lines.append('')
    lines += _matrix('Overhead of each memory node seen from each CPU node '
                     '(Figure 4 sums):', status['overhead'], diagonal='')
    lines.append('')
    lines.append('GUESTS (MiB per node: now, and where the placer would put '
                 'it if it started now)')
    if not status['guests']:
        lines.append('  none')
    for guest in status['guests']:
        lines += _guest_lines(guest)
    lines.append('')
    lines.append('NEXT REBALANCING MOVES')
    if not status['rebalance_moves']:
        lines.append('  none')
    for move in status['rebalance_moves']:
        lines += _wrap('%s: %d MiB node %d -> %d (%s)' % (
            move['guest'], move['mb'], move['from'], move['to'],
            move['reason']), indent='    ', first='  ')
    for note in status['notes']:
        lines.append('')
        lines += _wrap(note)
    return '\n'.join(lines)


def _guests(count: int) -> str:
    return '%d guest%s' % (count, '' if count == 1 else 's')


def _optimizer_text(optimizer: dict) -> str:
    text = {'off': 'Optimizer: off.',
            'moves': 'Optimizer: moves guests.',
            'advises': 'Optimizer: advises only (enforcement advisory).'}[
                optimizer['mode']]
    if optimizer['moved']:
        moved = optimizer['moved']
        text += (' It moved %s here now %d time%s: %d kept and %d undone '
                 'after its closed loop, the rest not judged.' % (
                     _guests(optimizer['guests']), moved,
                     '' if moved == 1 else 's', optimizer['kept'],
                     optimizer['undone']))
    else:
        text += ' It has moved none of the guests here now.'
    model = optimizer.get('model') or {}
    if model.get('error'):
        text += ' Its saved cost model state cannot be used: %s.' % (
            model['error'])
    elif model.get('trust') is not None:
        from nova_numa_overhead.compute import optimizer as opt_mod
        fit = opt_mod.calibration_text(model['calibration'])
        now = model.get('trust_now')
        text += (' The agent last saved at %s its trust in the cost '
                 'model, %.2f (1: its predicted gains came true%s)%s.' % (
                     model['saved_at'] or 'an unknown time', model['trust'],
                     '; %.2f by now, no verdict having taught it for over '
                     'an hour' % now if now is not None and
                     round(now, 2) > round(model['trust'], 2) else '',
                     '; at its recent verdicts, ' + fit if fit else
                     ', and no verdict yet'))
    elif model.get('file'):
        text += (' No cost model state saved in %s yet (no verdict has '
                 'changed it).' % model['file'])
    return text


def _kernel_text(kernel: dict | None, enforcement: str) -> str:
    """The kernel's NUMA balancing and numad, in a sentence or two."""
    if kernel is None:
        return ('Kernel: NUMA balancing and numad unknown (not a local '
                'QEMU host, or unreadable).')
    text = kernel['text']
    if kernel['steps_back']:
        text += (' With enforcement = %s the agent steps back here (places, '
                 'confines and moves nothing) while numad runs: stop numad, '
                 'or run the agent with enforcement = advisory.'
                 % enforcement)
    return text


def _sources_text(sources: dict) -> str:
    """The counter sources this host has, in one sentence."""
    perf = sources['perf']
    parts = ['perf events (cycles, instructions, LLC) %s' % (
        'yes, %s (LLC events on %d)' % (_guests(perf['guests']),
                                        perf['llc_guests'])
        if perf['available'] else 'no')]
    stalls = sources['stalled_cycles']
    parts.append('stalled-cycles event %s' % (
        'yes, %s' % _guests(stalls['guests']) if stalls['available']
        else 'no (reads 0)'))
    resctrl = sources['resctrl']
    if resctrl['available']:
        text = 'yes, %s' % _guests(resctrl['guests'])
    elif resctrl['error']:
        text = 'no (%s)' % resctrl['error']
    else:
        text = 'no'
    parts.append('resctrl memory bandwidth %s' % text)
    matrix = sources['matrix']
    measured = ' and '.join(kind for kind in ('latency', 'bandwidth')
                            if matrix[kind])
    slit = 'SLIT distances only (%s)' % (
        'topology_file %s ignored: %s' % (matrix['topology_file'],
                                          matrix['ignored'])
        if matrix.get('ignored') else 'no probe')
    parts.append('node matrix %s' % {
        'probe': '%s measured by the probe (%s)' % (
            measured, matrix['topology_file']),
        'hypervisor': '%s from the hypervisor' % measured,
        'slit': slit}[matrix['source']])
    # Nodes without CPUs (memory-only) have no LLC of their own.
    llc = [size for size, cpus in zip(sources.get('llc_mb') or [],
                                      sources.get('node_cpus') or [])
           if cpus]
    known = [size for size in llc if size is not None]
    sizes = '/'.join('%g' % size for size in sorted(set(known)))
    if known and len(known) == len(llc):
        text = '%s MiB per node' % sizes
    elif known:
        text = '%s MiB on %d of %d nodes with CPUs' % (
            sizes, len(known), len(llc))
    else:
        from nova_numa_overhead.overhead import cost
        text = ('not listed by libvirt (the cost model assumes %g '
                'memory-intensive vCPUs per core)' % cost.LLC_VCPUS_PER_CORE)
    parts.append('LLC size %s' % text)
    return 'Counter sources: %s.' % '; '.join(parts)


def _bandwidth_text(rates: list) -> str:
    """``node:local/total`` MB/s where the guest's vCPUs moved bytes."""
    used = ['%d:%.0f/%.0f' % (n, local / 1e6, total / 1e6)
            for n, (local, total) in enumerate(rates) if total]
    return '  '.join(used + ['MB/s local/total']) if used else \
        'no memory traffic'


def _counters_text(guest: dict) -> str:
    if not guest['counters']:
        return 'no counters (perf events %s)' % (
            guest['perf_events'] or 'not read: pinned or unreadable')
    ips = guest['instructions_per_s']
    ips = '%s instructions/s' % ('-' if ips is None else '%.3g' % ips)
    if guest['ipc'] is None:
        return 'no cycles counted (idle?), %s' % ips
    return 'LLC hit rate %s, cycle loss %s, IPC %s, %s' % (
        _value(guest['llc_hit_rate']), _value(guest['cycle_loss']),
        _value(guest['ipc']), ips)


def _ids(ids) -> str:
    return ','.join(str(i) for i in ids) if ids else 'all'


def _placement_text(guest: dict) -> str:
    """Nova's placement, and the agent's restriction of it."""
    text = 'allows nodes %s, CPUs %s' % (
        _ids(guest['nova_nodes']), _ids(guest['nova_cpus']))
    restricted = []
    if guest['agent_nodes']:
        restricted.append('nodes %s' % _ids(guest['agent_nodes']))
    if guest['agent_cpus']:
        restricted.append('CPUs %s' % _ids(guest['agent_cpus']))
    restriction = ' and '.join(restricted) or 'nothing'
    return text + '; agent restricts to %s' % restriction


def _last_text(guest: dict) -> str:
    """The running agent's last action on the guest, and its outcome."""
    if not guest['last_action']:
        return 'no action recorded by the agent'
    text = '%s at %s: %s' % (guest['last_action'], guest['last_at'] or '?',
                             guest['last_outcome'] or '-')
    if guest['recorded_elsewhere']:
        text += ' (on %s)' % guest['recorded_on']
    counts = guest['optimizer']
    if counts['moved']:
        text += '; optimizer moves %d (kept %d, undone %d)' % (
            counts['moved'], counts['kept'], counts['undone'])
    until = counts.get('left_alone_until')
    if until and not guest['recorded_elsewhere'] and \
            (hv_mod.parse_utc(until) or 0.0) > time.time():
        text += '; optimizer leaves it alone until %s' % until
    return text


def _guest_lines(guest: dict) -> list:
    if guest['managed']:
        state = 'managed, policy %s, max_nodes %d' % (
            guest['policy'], guest['max_nodes'])
        if not guest['rebalance']:
            state += ', no rebalancing'
        if guest['workload']:
            state += ', workload %s' % guest['workload']
    else:
        state = 'not managed: %s' % guest['reason']
    lines = _wrap('%s  %d MiB  %d vCPUs  %s' % (
        guest['name'], guest['memory_mb'], guest['vcpus'], state),
        indent='      ', first='  ')
    lines += _wrap(_counters_text(guest), indent=' ' * 10,
                   first='    perf  ')
    if guest['bandwidth_bps'] is not None:
        lines += _wrap(_bandwidth_text(guest['bandwidth_bps']),
                       indent=' ' * 10, first='    mbm   ')
    lines += _wrap(_placement_text(guest), indent=' ' * 10,
                   first='    nova  ')
    lines += _wrap(_last_text(guest), indent=' ' * 10, first='    last  ')
    lines += _wrap(_nodes_text(guest['memory_mb_per_node']),
                   indent=' ' * 10, first='    now   ')
    if guest['plan_mb_per_node'] is not None:
        lines += _wrap(_nodes_text(guest['plan_mb_per_node']),
                       indent=' ' * 10, first='    plan  ')
        moves = ', '.join('%d MiB %d->%d' % (m['mb'], m['from'], m['to'])
                          for m in guest['placement_moves']) or 'nothing'
        lines += _wrap('overhead %.2f; to get there: %s' % (
            guest['planned_overhead'], moves), indent=' ' * 10,
            first=' ' * 10)
    elif guest['managed']:
        lines += _wrap(guest['reason'], indent=' ' * 10,
                       first='    plan  ')
    return lines


# -- running it --------------------------------------------------------------

def _hint(message: str) -> str:
    lower = message.lower()
    if any(word in lower for word in ('permission denied', 'authenticat',
                                      'polkit', 'access denied')):
        return ' (run it as root or as a member of the libvirt group)'
    if any(word in lower for word in ('connection refused',
                                      'no such file', 'failed to connect')):
        return ' (is libvirtd running? see --connect)'
    return ''


def _fail(message: str, code: int) -> int:
    message = common.one_line(message)
    print('%s: %s%s' % (PROG, message, _hint(message)), file=sys.stderr)
    return code


def run(args) -> int:
    """Run ``status`` with parsed arguments; returns the exit code."""
    try:
        with _logging(args.debug):
            conf = load_conf(args.config_file)
            uri = args.connect or conf.numa_overhead_agent.connection_uri
            interval = min(args.interval, args.sample)
            status = collect(conf, uri,
                             sample_count(args.sample, interval), interval,
                             perf_events=args.perf_events)
    except ConfigError as exc:
        return _fail('configuration error: %s' % exc, EXIT_CONFIG)
    except hv_mod.HypervisorError as exc:
        return _fail(str(exc), EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        return _fail('unexpected error: %s: %s' % (type(exc).__name__, exc),
                     EXIT_ERROR)
    if args.format == 'json':
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(render(status))
    return 0


def main(argv=None) -> int:
    """``python -m nova_numa_overhead.cmd.status``: status on its own."""
    parser = common.ArgumentParser(prog='nova-numa-overhead')
    add_parser(parser.add_subparsers(dest='command', required=True))
    return run(parser.parse_args(['status'] + list(
        sys.argv[1:] if argv is None else argv)))


if __name__ == '__main__':
    sys.exit(main())
