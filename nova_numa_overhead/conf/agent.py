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
"""Options of the ``[numa_overhead_agent]`` group (the compute agent)."""

import math

from oslo_config import cfg
from oslo_config import types

from nova_numa_overhead.conf import base
from nova_numa_overhead.conf import numa_overhead
from nova_numa_overhead.overhead import classifier
from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import samples

GROUP = cfg.OptGroup(
    'numa_overhead_agent',
    title='NUMA overhead compute agent',
    help="""
Options of nova-numa-overhead-agent, which runs on every compute host next to
nova-compute and libvirtd: it measures each NUMA node's memory-zone overhead,
reports it to the schedulers, places every managed guest's memory over
low-overhead nodes when it starts and rebalances it periodically.
""")


# What the docs recommend for production (doc/source/admin/deployment.rst,
# "Production"), on top of the option defaults: the simulator runs the
# agent with exactly this, and a test keeps the docs and this in step.
PRODUCTION = {
    'enforcement': 'pages',
}


# Host presets of the simulator (``sim_host``), with what they are.
SIM_HOSTS = [
    ('ibm-x3850-2s', 'IBM x3850 X5, 2 sockets (Liu & Li)'),
    ('ibm-x3850-4s', 'IBM x3850 X5, 4 sockets (Liu & Li)'),
    ('ibm-x3850-8s', 'IBM x3850 X5, 8 sockets (Liu & Li)'),
    ('intel-e5-4610', '4-node Xeon E5-4610 (vTRMS platform A)'),
    ('amd-6376', '8-node Opteron 6376 (vTRMS platform B)'),
]


def _thresholds(name, default, what):
    return cfg.ListOpt(
        name + '_thresholds',
        item_type=cfg.types.Float(min=0.0),
        default=[str(v) for v in default],
        help="""
Ascending thresholds that classify %s into overhead levels: the level is the
number of thresholds the measured value reaches.

Possible values:

* A comma-separated list of strictly ascending numbers >= 0.

Related options:

* ``[numa_overhead_agent] llc_thresholds``, ``mc_thresholds``,
  ``inter_thresholds``, ``rml_thresholds``
""" % what)


OPTS = [
    cfg.StrOpt(
        'connection_uri',
        default='qemu:///system',
        help="""
libvirt connection URI of the local hypervisor.

Possible values:

* Any libvirt URI; ``test:///default`` runs against libvirt's test driver.

Related options:

* ``[numa_overhead_agent] hypervisor``
"""),
    cfg.StrOpt(
        'hypervisor',
        default='libvirt',
        choices=[('libvirt', 'the local libvirt daemon '
                  '(``connection_uri``)'),
                 ('sim', 'a simulated NUMA host (``sim_host``, '
                  '``sim_scenario``)')],
        help="""
Hypervisor backend the agent measures and acts on.

Possible values:

* ``libvirt``: the local libvirt daemon.
* ``sim``: a simulated NUMA host (``sim_host``), for trying the agent
  without a multi-socket machine.

Related options:

* ``[numa_overhead_agent] connection_uri``
* ``[numa_overhead_agent] sim_host``
"""),
    cfg.StrOpt(
        'sim_host',
        default='ibm-x3850-4s',
        # The presets of nova_numa_overhead.sim.presets.HOSTS (a test
        # keeps them in step), not imported: it needs numpy, which
        # nova-scheduler reading these options may not have.
        choices=SIM_HOSTS,
        help="""
Host preset simulated when ``hypervisor = sim``.

Possible values:

* ``ibm-x3850-2s``, ``ibm-x3850-4s``, ``ibm-x3850-8s``, ``intel-e5-4610``,
  ``amd-6376``.

Related options:

* ``[numa_overhead_agent] hypervisor``
* ``[numa_overhead_agent] sim_scenario``
"""),
    cfg.StrOpt(
        'sim_scenario',
        default='mixed-8',
        help="""
Built-in scenario (``nova-numa-overhead simulate --list``) whose guests start
on the simulated host when ``hypervisor = sim``, one every
``sample_interval`` seconds.

Possible values:

* The name of a built-in scenario.

Related options:

* ``[numa_overhead_agent] hypervisor``
* ``[numa_overhead_agent] sim_host``
"""),
    cfg.IntOpt(
        'sample_interval',
        default=1,
        min=1,
        help="""
Seconds between two samples of the guests' hardware counters. Each guest
keeps a sliding window of ``window_size`` samples.

Possible values:

* An integer >= 1.

Related options:

* ``[numa_overhead_agent] window_size``
* ``[numa_overhead_agent] report_interval``
"""),
    cfg.IntOpt(
        'window_size',
        default=samples.DEFAULT_WINDOW,
        min=1,
        max=1024,
        help="""
Samples per guest in the sliding window the estimator averages over (the
paper uses 16).

Possible values:

* An integer from 1 to 1024.

Related options:

* ``[numa_overhead_agent] sample_interval``
"""),
    cfg.IntOpt(
        'report_interval',
        default=60,
        min=1,
        help="""
Seconds between two periodic reports to the schedulers. The agent also
reports at once when a guest starts or stops or a level changes.

Possible values:

* An integer >= 1.

Related options:

* ``[numa_overhead_agent] heartbeat_interval``
* ``[numa_overhead] report_ttl``
"""),
    cfg.IntOpt(
        'heartbeat_interval',
        default=60,
        min=1,
        help="""
Longest time without a report: the schedulers treat a host silent for
``[numa_overhead] report_ttl`` as unknown.

Possible values:

* An integer >= 1, at most half of ``[numa_overhead] report_ttl``.

Related options:

* ``[numa_overhead_agent] report_interval``
* ``[numa_overhead] report_ttl``
"""),
    cfg.IntOpt(
        'rebalance_interval',
        default=30,
        min=0,
        help="""
Seconds between two rebalancing passes (the P2M swap FIFO analogue) and
periodic vCPU co-locations (``colocate_vcpus``); 0 disables both (the
co-location when a guest is placed stays).

Possible values:

* An integer >= 0.

Related options:

* ``[numa_overhead_agent] rebalance_threshold``
* ``[numa_overhead_agent] migrate_rate_mb_per_s``
"""),
    cfg.StrOpt(
        'enforcement',
        default='advisory',
        choices=[
            ('off', 'measure and report only (an earlier enforcing '
                    'run\'s restrictions are given back)'),
            ('advisory', 'log (and notify) what would be done, change '
                         'nothing (an earlier enforcing run\'s '
                         'restrictions are given back)'),
            ('nodeset', 'restrict guests to the planned nodes (the '
                        'cpuset cgroups of their QEMU threads)'),
            ('pages', 'restrict to the planned nodes and move pages to '
                      'reach the planned shares (move_pages(2))'),
        ],
        help="""
How the agent enforces placement and rebalancing decisions.

``nodeset`` and ``pages`` restrict a guest written without ``<numatune>``
(how Nova writes a floating guest) by writing ``cpuset.mems`` of its QEMU
threads' cgroups through the privileged helper, as often as needed; the
kernel moves the pages outside the new nodes meanwhile (cgroup v2).
libvirt's own live numatune change works only once on such a guest. A
guest with ``mode='restrictive'`` numatune is restricted through libvirt;
one with another numatune mode is left alone.

Related options:

* ``[numa_overhead_agent] reserve_mb``
* ``[numa_overhead_agent] migrate_rate_mb_per_s``

Possible values:

* ``off``, ``advisory``, ``nodeset`` or ``pages``.
"""),
    cfg.FloatOpt(
        'migrate_rate_mb_per_s',
        default=512.0,
        min=0.0,
        help="""
Highest average rate of the page moves the agent makes with move_pages(2),
in MiB/s, summed over all guests; 0 means no limit. When the agent narrows a
guest's nodeset, the kernel moves the pages outside it at once, during the
write, at its own migration speed: this rate does not bound those. The
optimizer also paces its moves (the page budget of a pass) and times their
verdicts at this rate (2048 MiB/s when it is 0); it prices a move by the
MiB moved, not by this rate.

Possible values:

* A float >= 0.

Related options:

* ``[numa_overhead_agent] max_move_mb_per_period``
* ``[numa_overhead_agent] enforcement``
"""),
    cfg.IntOpt(
        'max_move_mb_per_period',
        default=1024,
        min=0,
        help="""
Most memory, in MiB, the rebalancer moves in one period, over all guests.

Possible values:

* An integer >= 0.

Related options:

* ``[numa_overhead_agent] migrate_rate_mb_per_s``
* ``[numa_overhead_agent] rebalance_interval``
"""),
    cfg.IntOpt(
        'fifo_entries',
        default=256,
        min=1,
        max=65536,
        help="""
Entries of each guest's per-node swap FIFO of candidate page ranges (the
paper uses 256).

Possible values:

* An integer from 1 to 65536.

Related options:

* ``[numa_overhead_agent] rebalance_interval``
* ``[numa_overhead_agent] rebalance_threshold``
"""),
    cfg.StrOpt(
        'managed_guests',
        default='floating',
        choices=[
            ('floating', 'every guest Nova did not pin'),
            ('opt_in', 'only guests whose flavor sets '
                       '``numa_overhead:policy``'),
        ],
        help="""
Which guests the agent places and rebalances. Guests Nova pinned (strict
numatune memnodes, dedicated CPUs, hugepages) are never touched.

Possible values:

* ``floating`` or ``opt_in``.

Related options:

* flavor extra spec ``numa_overhead:policy``
"""),
    cfg.IntOpt(
        'reserve_mb',
        default=1024,
        min=0,
        help="""
Room, in MiB, that must remain on the chosen nodes after a guest is
restricted to them, so that the restriction cannot cause an out-of-memory
kill. Room is free memory minus the memory guests were given and have
not touched yet (it lands on their nodes later): a guest is only
restricted to nodes whose room holds all of its configured memory plus
``reserve_mb``, and a guest the agent restricted is given Nova's nodes
back when later guests leave its nodes too little room.

Possible values:

* An integer >= 0.

Related options:

* ``[numa_overhead_agent] enforcement``
"""),
    cfg.IntOpt(
        'rebalance_threshold',
        default=6,
        min=0,
        help="""
Overhead level above which a node a guest uses triggers rebalancing, when a
node at least two levels lower exists (Liu & Li, section 4.3).

Possible values:

* An integer >= 0.

Related options:

* ``[numa_overhead_agent] rebalance_interval``
* ``[numa_overhead_agent] mc_thresholds`` and the other thresholds
"""),
    cfg.FloatOpt(
        'llc_low_bound',
        default=classifier.LLC_LOW_BOUND,
        min=0.0,
        help="""
LLC references per thousand instructions below which a guest is LLC
friendly and left alone (vProbe: 3).

Possible values:

* A float >= 0, below ``llc_high_bound``.

Related options:

* ``[numa_overhead_agent] llc_high_bound``
"""),
    cfg.FloatOpt(
        'llc_high_bound',
        default=classifier.LLC_HIGH_BOUND,
        min=0.0,
        help="""
LLC references per thousand instructions above which a guest thrashes the
LLC (vProbe: 20).

Possible values:

* A float >= 0, above ``llc_low_bound``.

Related options:

* ``[numa_overhead_agent] llc_low_bound``
"""),
    cfg.IntOpt(
        'node_bandwidth_mbps',
        default=classifier.DEFAULT_NODE_BANDWIDTH_MBPS,
        min=1,
        help="""
Usable memory bandwidth of one node's controller, in MB/s, against which
vDARM's sensitivity factor compares a guest's bandwidth demand. The
optimizer's cost model takes it as every node's controller bandwidth
without a ``topology_file``; with one whose bandwidth was measured by fewer
concurrent streams than a node has CPUs (``--streams``, a probe confined by
a cpuset or affinity to some of a node's CPUs, or a file from an earlier
version of the probe), as the bandwidth of its largest local figure, the
rest scaled by the same factor.

Possible values:

* An integer >= 1.

Related options:

* ``[numa_overhead_agent] rebalance_threshold``
* ``[numa_overhead_agent] topology_file``
"""),
    cfg.BoolOpt(
        'colocate_vcpus',
        default=False,
        help="""
Narrow a floating guest's vCPU affinity to the CPUs of the nodes holding most
of its memory (vTRMS/vDARM), inside the host's shared CPU set, when it is
placed and every ``rebalance_interval``. Off by default: Nova owns vCPU
placement.

Possible values:

* True or False.

Related options:

* ``[numa_overhead_agent] enforcement`` (``nodeset`` or ``pages``)
* ``[numa_overhead_agent] rebalance_interval``
"""),
    cfg.BoolOpt(
        'remote_placement',
        default=False,
        help="""
Let a starting guest's memory go to nodes its vCPUs do not run on, as Liu &
Li's proportional split over the low-overhead nodes does. Off by default: the
memory of a guest of the proportional policy (the default) is planned over the
nodes its vCPUs run on only (by the same rule, among those nodes), and the
guest is left where the kernel puts it when they cannot hold it; spreading it
further is the optimizer's decision (predicted time, checked by its closed
loop) and the rebalancer's. A guest whose vCPUs may run beyond those nodes
(floating over several nodes, as Nova's guests without a NUMA topology do
on a multi-node host) is not confined at all when it has just started and
its memory is already there, nor when it was running before (found by the
agent, or resumed): the kernel keeps its pages near its vCPUs until the
optimizer moves both. A starting guest has not been measured yet:
placing it remotely on overhead levels alone was where the agent most often
made guests slower than Nova's default (measured in the simulator's sweeps;
see the simulator guide). The ``local`` and ``spread`` policies are planned
over every node Nova allows either way, and so is a guest whose vCPUs' nodes
are not known yet. The schedulers score hosts on the paper's plan either way.

Possible values:

* True: the paper's first placement; False: local first placement.

Related options:

* ``[numa_overhead_agent] optimize``, ``enforcement``
"""),
    cfg.BoolOpt(
        'optimize',
        default=True,
        help="""
Move floating guests, vCPUs and memory together, to the node set where the
agent's cost model predicts the host's guests run faster (CPU sharing, LLC
sharing, memory-controller and link queueing, remote latency), only when the
predicted gain pays the page moves back within ``payback_horizon`` with
``gain_margin``; then watch the guest and undo what made it slower (closed
loop, with an exponential backoff per guest). vCPUs stay within the CPUs
Nova allowed; pinned guests are never touched. Acts only with
``enforcement`` ``nodeset`` or ``pages``; with ``advisory`` it logs what it
would do.

Possible values:

* True or False.

Related options:

* ``[numa_overhead_agent] enforcement``, ``optimize_interval``,
  ``payback_horizon``, ``gain_margin``, ``loop_window``
"""),
    cfg.IntOpt(
        'optimize_interval',
        default=5,
        min=1,
        help="""
Seconds between two passes of the optimizer (``optimize``).

Possible values:

* An integer >= 1.

Related options:

* ``[numa_overhead_agent] optimize``
"""),
    cfg.IntOpt(
        'payback_horizon',
        default=120,
        min=1,
        help="""
Seconds within which a move's predicted gain must pay back its cost (a
fixed price of about 2 ms of the guest's time per MiB moved, whatever
``migrate_rate_mb_per_s`` is).

Possible values:

* An integer >= 1.

Related options:

* ``[numa_overhead_agent] gain_margin``, ``min_gain``
"""),
    cfg.FloatOpt(
        'gain_margin',
        default=2.0,
        min=1.0,
        help="""
How many times over a move's predicted gain must pay its cost back within
``payback_horizon``; the predicted gain must also reach ``min_gain``.

Possible values:

* A number >= 1.

Related options:

* ``[numa_overhead_agent] payback_horizon``, ``min_gain``
"""),
    cfg.FloatOpt(
        'min_gain',
        default=0.05,
        min=0.0,
        help="""
The smallest predicted gain worth a move, as the sum over the host's guests
of their relative speed change (0.05: one guest 5% faster).

Possible values:

* A number >= 0.

Related options:

* ``[numa_overhead_agent] gain_margin``, ``payback_horizon``
"""),
    cfg.IntOpt(
        'loop_window',
        default=5,
        min=1,
        max=32,
        help="""
Samples of a guest's progress (instructions per second) compared before and
after a move, once its pages have landed. The move is undone, and the guest
left alone for a backoff period that doubles with every undo, when the guest
and the guests on the nodes it left or joined lost more than
``undo_threshold`` in all (the sum of their relative changes, or the nodes'
instructions per second), the guest itself more than three times that, or
the guest, predicted to gain, more than ``undo_threshold``; when a guest
started on the host or left it in between, on the guest alone (its own loss
beyond ``undo_threshold``).
A move of a guest measured fewer samples than this before it is not judged
(a larger window leaves more of a young guest's moves unjudged), nor is one
across a change of the guest's workload (memory-intensive or not, from its
LLC references per instruction).

Possible values:

* An integer from 1 to 32.

Related options:

* ``[numa_overhead_agent] undo_threshold``
"""),
    cfg.IntOpt(
        'settle_windows',
        default=2,
        min=0,
        max=60,
        help="""
Number of ``loop_window`` periods (each ``loop_window`` x ``sample_interval``
seconds: 10 s in all with the defaults) after a guest started on the host,
started again or resumed (as at the end of a live migration), during which
the optimizer makes no move: every guest's rates then mix the host before
and after (the newcomer touching its memory, its neighbours slowed by it),
and a move chosen on them is judged against a host still changing. After a
guest leaves the optimizer waits only until the cost model's 3 samples are
past it (the verdicts awaited then, and the moves made within a
``loop_window`` of it, are judged on their guest alone). A pass due
meanwhile runs once the host has settled. The guests the agent finds when
it starts do not count. Only the optimizer
waits: verdicts, undos, pages going back, the first placement of a guest
and the rebalancer go on. On a host filling with a burst of boots the
optimizer waits for the burst to end. In the simulator the default puts
single guests first: far fewer guests below 0.90x of their Nova-default
throughput, a lower mean (see the simulator guide).

Possible values:

* 0: no wait after a guest starts or leaves, as before this option.
* An integer from 1 to 60.

Related options:

* ``[numa_overhead_agent] loop_window``
* ``[numa_overhead_agent] sample_interval``
* ``[numa_overhead_agent] optimize_interval``
"""),
    cfg.FloatOpt(
        'undo_threshold',
        default=0.03,
        min=0.0,
        max=0.5,
        help="""
Relative loss of progress after a move, beyond which the move is undone
(see ``loop_window``).

Possible values:

* A number between 0 and 0.5.

Related options:

* ``[numa_overhead_agent] loop_window``
"""),
    cfg.FloatOpt(
        'guest_floor',
        default=0.97,
        min=0.0,
        max=1.0,
        help="""
Lowest speed, as a fraction of its speed before the optimizer's moves (since
the agent started; an undone move no longer counts), that the optimizer's
moves may leave any guest at, as the cost model predicts them: a move that
would slow a neighbour (or the guest itself) below it is not made, however
much it gains in all. 0 turns the floor off: moves are chosen for the
guests' summed speed, and a guest may be slowed for others.

A floor protects single guests (an operator with per-guest SLAs) at a price
in the mean; see the simulator guide for both measured. The default leaves
the cost model's errors a margin above 0.90: of the neighbours a move was
predicted to slow, about one in eight is measured more than 3 points below
the prediction. 1.0 lets no guest be predicted below its speed before the
optimizer's moves (a guest they were predicted to speed up may give that
back), and about half the moves stop.

Possible values:

* A number between 0 (no floor) and 1.

Related options:

* ``[numa_overhead_agent] optimize``
"""),
    cfg.BoolOpt(
        'learn_miss_cost',
        default=True,
        help="""
Where the CPU has no stalled-cycles event, learn what an LLC miss costs each
guest that is not memory-intensive from its own samples (the slope of its
cycles per instruction on its LLC misses per instruction, as neighbours come
and go), instead of the cost model's fixed 50 cycles. A light guest that
waits out each miss is then seen to gain from moving away from a neighbour
that thrashes the LLC; the optimizer also makes more moves. In the simulator
it helps the mean and the wins over other policies and puts a guest below
0.90x of its Nova-default throughput in slightly more scenarios (the
simulator guide has the figures).

Possible values:

* True: learn it where the samples show it; False: 50 cycles a miss.

Related options:

* ``[numa_overhead_agent] optimize``
* ``[numa_overhead_agent] guest_floor``
"""),
    cfg.StrOpt(
        'topology_file',
        help="""
JSON file with a measured node-to-node latency and/or bandwidth matrix
(``nova-numa-overhead probe`` writes it). Used instead of SLIT distances for
the remote-access latency levels when present, and by the optimizer's cost
model for every node pair's latency and bandwidth. Its bandwidth is taken
as the controllers' and links' capacities when every CPU of each node
measured it together (the probe's default); otherwise (``--streams``
below a node's CPUs, a probe confined by a cpuset or affinity to some of
a node's CPUs, or a file of the probe's format 1, one stream per cell,
read with a warning) as ratios scaled to ``node_bandwidth_mbps``.

Possible values:

* A path, or unset to use SLIT.

Related options:

* ``[numa_overhead_agent] rml_thresholds``
* ``[numa_overhead_agent] node_bandwidth_mbps``
"""),
    cfg.StrOpt(
        'state_file',
        default='/var/lib/nova/numa-overhead-model.json',
        help="""
JSON file where the agent keeps, across its restarts, what its optimizer
learned of the cost model's fit on this host: its trust in the model (how
far predicted gains came true at the closed loop's verdicts; a host whose
costs the model misjudges gets fewer, surer moves) and the predictions
beside the measured changes of its recent verdicts (``nova-numa-overhead
status`` shows them), and when a verdict last taught the trust: after an
hour without one, the agent stopped or not, the trust goes back towards 1
(half the way every 6 hours). Without the file a restarted agent trusts the
model fully again. A file learned for another plugin version, host name,
NUMA topology, ``topology_file`` (the file's name and the matrix it holds)
or ``node_bandwidth_mbps`` is not used (the optimizer starts afresh). Read
when the agent starts; written atomically at most once a minute after a
verdict changed it, and when the agent stops, by the agent's user, who must
be able to write to its directory (the default is in /var/lib/nova,
nova-compute's default ``state_path``). A file that cannot be read or
written is a warning, one that cannot be used is set aside as
``<file>.bad``: the agent keeps the state in memory and goes on. To reset
the trust: stop the agent, remove the file, start it.

Possible values:

* A path, or empty to keep the state in memory only.

Related options:

* ``[numa_overhead_agent] optimize``
* ``[numa_overhead_agent] topology_file``
"""),
    _thresholds('llc', estimator.DEFAULT_LLC_THRESHOLDS,
                'LLC contention (1 - LLC hit rate)'),
    _thresholds('mc', estimator.DEFAULT_MC_THRESHOLDS,
                'memory-controller congestion (cycle loss of local '
                'accesses)'),
    _thresholds('inter', estimator.DEFAULT_INTER_THRESHOLDS,
                'interconnect congestion (cycle loss of remote accesses)'),
    _thresholds('rml', estimator.DEFAULT_RML_THRESHOLDS,
                'remote-access latency (local / remote IPC ratio)'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    base.register(conf, GROUP, OPTS)


def list_opts():
    return {GROUP: OPTS}


def thresholds(conf) -> estimator.Thresholds:
    """The configured thresholds; ValueError naming the bad option."""
    opts = conf.numa_overhead_agent
    return estimator.Thresholds(llc=opts.llc_thresholds,
                                mc=opts.mc_thresholds,
                                inter=opts.inter_thresholds,
                                rml=opts.rml_thresholds)


def _is_float(opt) -> bool:
    """A float option, or a list of floats."""
    kind = opt.type
    if isinstance(kind, types.List):
        kind = kind.item_type
    return isinstance(kind, types.Float)


def check_finite(conf) -> None:
    """Refuse NaN and infinity in every float option of the plugin's
    groups: oslo.config's ``min``/``max`` let them through (a comparison
    with NaN is false).

    :raises ValueError: naming the option.
    """
    for group, opts in ((numa_overhead.GROUP.name, numa_overhead.OPTS),
                        (GROUP.name, OPTS)):
        for opt in opts:
            if not _is_float(opt):
                continue
            value = conf[group][opt.name]
            values = value if isinstance(value, list) else [value]
            bad = [v for v in values if v is not None and
                   not math.isfinite(v)]
            if bad:
                raise ValueError('[%s] %s: %s is not a finite number'
                                 % (group, opt.name, bad[0]))


def check_simulator(conf) -> None:
    """With ``hypervisor = sim``, a ``sim_scenario`` that is built in.

    :raises ValueError: naming the option and the known scenarios.
    """
    opts = conf.numa_overhead_agent
    if opts.hypervisor != 'sim':
        return
    try:
        from nova_numa_overhead.sim import scenarios
    except ImportError as exc:
        raise ValueError('[numa_overhead_agent] hypervisor = sim: cannot '
                         'load the simulator: %s' % exc)
    known = scenarios.builtin()
    if opts.sim_scenario not in known:
        raise ValueError('[numa_overhead_agent] sim_scenario: unknown '
                         'scenario %r (built-in ones: %s)'
                         % (opts.sim_scenario, ', '.join(sorted(known))))


def check(conf) -> None:
    """Cross-option checks oslo.config cannot express.

    :raises ValueError: naming the option and the problem.
    """
    opts = conf.numa_overhead_agent
    check_finite(conf)
    check_simulator(conf)
    try:
        thresholds(conf)
    except ValueError as exc:
        raise ValueError('[numa_overhead_agent] %s' % exc)
    if opts.llc_low_bound >= opts.llc_high_bound:
        raise ValueError('[numa_overhead_agent] llc_low_bound (%s) must be '
                         'below llc_high_bound (%s)'
                         % (opts.llc_low_bound, opts.llc_high_bound))
    if opts.heartbeat_interval * 2 > conf.numa_overhead.report_ttl:
        raise ValueError('[numa_overhead_agent] heartbeat_interval (%d) must '
                         'be at most half of [numa_overhead] report_ttl (%d)'
                         % (opts.heartbeat_interval,
                            conf.numa_overhead.report_ttl))
