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
"""Options of the ``[numa_overhead]`` group, read by the scheduler side.

The scheduler filter and weigher, the report store in every scheduler worker
and the agents' report publisher all read this group, so it lives in the
nova.conf that nova-scheduler and the agent share.
"""

from oslo_config import cfg

from nova_numa_overhead.conf import base
from nova_numa_overhead.overhead import planner

GROUP = cfg.OptGroup(
    'numa_overhead',
    title='NUMA memory-zone overhead scheduling',
    help="""
Options for the NUMAOverheadFilter and NUMAOverheadWeigher, and for the
channel on which compute hosts report their per-NUMA-node memory-zone
overhead to the schedulers.
""")

OPTS = [
    cfg.StrOpt(
        'report_topic',
        default='numa-overhead',
        help="""
oslo.messaging topic on which agents cast host reports to every scheduler
worker (fanout), and on which schedulers ask agents for a fresh report.

Possible values:

* A topic name, the same on all schedulers and agents.

Related options:

* ``[numa_overhead] transport_url``
"""),
    cfg.StrOpt(
        'transport_url',
        secret=True,
        help="""
Messaging transport of the host reports: the broker the schedulers listen
on. Agents publish their reports there and answer the schedulers' requests
for fresh ones there; schedulers (and ``nova-numa-overhead reports``)
listen there. When unset, ``[DEFAULT] transport_url`` is used.

In a cells v2 deployment nova-compute's ``[DEFAULT] transport_url`` points
at its cell's broker while nova-scheduler listens on the API-level one: set
this option, in the nova.conf the agent shares with nova-compute, to the
API-level broker's URL, or the schedulers never hear the agents. The
agents' notifications still go to ``[oslo_messaging_notifications]
transport_url``, else ``[DEFAULT] transport_url``, as nova-compute's do.

Possible values:

* Unset: ``[DEFAULT] transport_url``.
* An oslo.messaging transport URL, e.g. ``rabbit://user:pass@host:5672/``.

Related options:

* ``[numa_overhead] report_topic``
"""),
    cfg.IntOpt(
        'report_ttl',
        default=180,
        min=1,
        help="""
Seconds after which a host report counts as missing. The age is measured on
the scheduler's own clock from the moment the report arrived, plus the age
the agent declared when it sent it; clocks need not be synchronised.

Possible values:

* A positive number of seconds. It should be at least twice the agents'
  ``[numa_overhead_agent] heartbeat_interval``.

Related options:

* ``[numa_overhead] unknown_host``
* ``[numa_overhead] weight_of_unknown``
"""),
    cfg.IntOpt(
        'max_level',
        min=0,
        help="""
Highest planned overhead level a host may have for a request to pass the
NUMAOverheadFilter. Unset means no limit from the configuration. Flavors
(``numa_overhead:max_level``), aggregates (metadata
``numa_overhead_max_level``) and scheduler hints
(``numa_overhead_max_level``) can only lower it: the smallest value wins.

The planned overhead level of a host is the share-weighted mean of the
per-node overhead levels (Liu & Li, Figure 4) over the nodes the guest's
memory would be placed on.

Possible values:

* Unset, or an integer >= 0.

Related options:

* ``[numa_overhead] unknown_host``
"""),
    cfg.StrOpt(
        'unknown_host',
        default='pass',
        choices=[
            ('pass', 'hosts without a fresh report pass the filter'),
            ('fail', 'hosts without a fresh report fail the filter'),
        ],
        help="""
What the NUMAOverheadFilter does with a host that has no fresh report (no
agent, agent down, report older than ``report_ttl`` or rejected), or whose
reported free memory cannot hold the request (memory fit is Nova's to
judge), when a maximum level applies to the request.

Related options:

* ``[numa_overhead] report_ttl``
* ``[numa_overhead] max_level``

Possible values:

* ``pass``: hosts without a fresh report pass.
* ``fail``: they fail.
"""),
    cfg.FloatOpt(
        'weight_multiplier',
        default=0.0,
        help="""
Multiplier of the NUMAOverheadWeigher. Positive values prefer hosts with a
lower planned overhead; 0, the default, leaves the choice to Nova's other
weighers (the weigher weighs nothing); negative values prefer higher
overhead (not useful outside tests). Aggregate metadata
``numa_overhead_weight_multiplier`` overrides it for the hosts of that
aggregate. A host's weight is its raw weight (``1 / (1 + planned overhead
level)``, between 0 and 1) times the multiplier, not stretched over the
hosts' range: with 1.0, a host at level 0 outweighs one at level 1 by 0.5,
as much as Nova's RAM weigher puts a host with all its memory free ahead of
one of the same size with half of it free.

0 by default: in the project's simulator the weigher traded a small mean
gain for more clusters slowed below Nova's default placement (the simulator
guide has the figures). Its planned overhead is made of memory levels only:
a host whose CPUs are crowded with CPU-bound guests can look best. The
deployment guide says where turning it on may be worth trying.

Possible values:

* A float.

Related options:

* ``[numa_overhead] weight_of_unknown``
"""),
    cfg.FloatOpt(
        'weight_of_unknown',
        default=0.0,
        min=0.0,
        max=1.0,
        help="""
Raw weight given by the NUMAOverheadWeigher to hosts without a fresh report,
or whose reported free memory cannot hold the request. Known hosts weigh
``1 / (1 + planned overhead level)``: 1.0 is a host where the guest would
see no overhead, 0.5 a host at level 1, 0.2 a host at level 4. With a
positive ``weight_multiplier``, the default ranks unknown hosts after all
hosts that reported.

Possible values:

* A float between 0.0 and 1.0.

Related options:

* ``[numa_overhead] weight_multiplier``
"""),
    cfg.StrOpt(
        'default_policy',
        default='proportional',
        choices=[(p, d) for p, d in planner.POLICY_HELP.items()],
        help="""
Placement policy assumed for flavors without ``numa_overhead:policy``. The
scheduler scores hosts with the same planner the agent uses to place the
guest's memory when it starts.

Related options:

* ``[numa_overhead] default_max_nodes``

Possible values:

* ``proportional``, ``local``, ``spread`` or ``none`` (see
  ``numa_overhead:policy``).
"""),
    cfg.IntOpt(
        'default_max_nodes',
        default=planner.DEFAULT_MAX_NODES,
        min=1,
        max=planner.MAX_NODES_LIMIT,
        help="""
Number of NUMA nodes the proportional policy spreads a guest's memory over
when the flavor has no ``numa_overhead:max_nodes`` (the paper uses 4).

Possible values:

* An integer from 1 to 64.

Related options:

* ``[numa_overhead] default_policy``
"""),
    cfg.FloatOpt(
        'claim_penalty',
        default=1.0,
        min=0.0,
        max=16.0,
        help="""
Overhead levels added, between two reports of a host, to each node that the
planner would give a guest placed there since the last report. Nova's own
per-request bookkeeping (free RAM and instance count of the host) tells the
store how much was placed; this keeps a burst of requests from passing a
``max_level`` limit those guests have used up, and (with the weigher on) from
piling onto the host that looked best in its last report.

Possible values:

* A float >= 0; 0 only corrects free memory.

Related options:

* ``[numa_overhead] report_ttl``
* ``[numa_overhead_agent] report_interval``
"""),
    cfg.BoolOpt(
        'sync_on_start',
        default=True,
        help="""
When a scheduler worker starts listening for reports, ask every agent for a
fresh report at once instead of waiting for their next periodic report.

Possible values:

* True or False.

Related options:

* ``[numa_overhead] report_topic``
"""),
    cfg.IntOpt(
        'max_report_bytes',
        default=65536,
        min=1024,
        deprecated_for_removal=True,
        deprecated_reason="""
Measuring a report's size meant encoding it again, which cost seconds for a
huge message. The scheduler now bounds a report by its shape before reading
it (at most 64 nodes, bounded strings and numbers, unknown keys not read),
which costs well under a millisecond whatever arrives. This option is
ignored.
""",
        help="""
Ignored (see the deprecation). Reports are bounded by their shape: at most
64 nodes, and nothing else of a report is read but its known keys.

Possible values:

* An integer >= 1024.

Related options:

* ``[numa_overhead] max_hosts``
"""),
    cfg.IntOpt(
        'max_hosts',
        default=200000,
        min=1,
        help="""
Most hosts whose reports one scheduler worker keeps. Past it, reports of new
hosts are refused (one warning per minute says how many) and the hosts held
are kept; room is made only by forgetting hosts without a fresh report.
Hosts silent for three ``report_ttl`` are forgotten anyway. The default is
well above any real cloud and only guards the worker's memory against a
flood of made-up host names: a host costs about 0.7 KiB (4 NUMA nodes) to
0.8 KiB (8 nodes), so the default caps the store near 140-160 MiB per
worker. Lower it to about twice your number of compute hosts to bound
memory tighter.

Possible values:

* An integer >= 1.

Related options:

* ``[numa_overhead] report_ttl``
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    base.register(conf, GROUP, OPTS)


def list_opts():
    return {GROUP: OPTS}
