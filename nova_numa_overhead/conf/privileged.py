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
"""Options of ``[numa_overhead_privileged]``, for the sample and the docs.

These are oslo.privsep's own options: its ``PrivContext`` registers them
under the context's section when the agent first needs the privileged
helper (``nova_numa_overhead.compute.privsep``). Registering them here too
would clash with that, so this module only lists them, with the defaults
the context sets and help that says what they mean for this plugin. A
unit test checks that the names and types still match oslo.privsep's.
"""

import copy
import multiprocessing

from oslo_config import cfg
from oslo_config import types

GROUP = cfg.OptGroup(
    'numa_overhead_privileged',
    title='NUMA overhead agent: privileged helper',
    help="""
oslo.privsep options of the agent's privileged helper, which moves guest
pages (move_pages(2)) and reads QEMU's ``/proc/<pid>/numa_maps``,
``pagemap`` and ``clear_refs`` when ``[numa_overhead_agent] enforcement =
pages``. Other enforcement modes never start it. It acts on a libvirt
domain's QEMU and nothing else. Recommended: ``user`` and ``group`` set to
QEMU's, ``capabilities`` empty. See the deployment guide for the sudoers or
rootwrap rule and for why each kernel check passes.
""")

#: The capabilities the helper keeps by default (compute/privsep.py):
#: what it needs when it runs as root.
CAPABILITIES = ['CAP_SYS_PTRACE']
#: ... and the cgroup helper's (compute/privsep.py).
CGROUP_CAPABILITIES = ['CAP_SYS_PTRACE', 'CAP_SYS_NICE']

_RELATED = """
Related options:

* ``[numa_overhead_agent] enforcement``
* ``[numa_overhead_privileged] helper_command``
"""

OPTS = [
    cfg.StrOpt(
        'helper_command',
        help="""
Command that starts the privileged helper. oslo.privsep appends
``--privsep_context`` and ``--privsep_sock_path`` to it.

Possible values:

* Unset: ``sudo privsep-helper`` with the agent's ``--config-file``
  arguments.
* A command, e.g. ``sudo nova-rootwrap /etc/nova/rootwrap.conf
  privsep-helper --config-file /etc/nova/nova.conf``.
""" + _RELATED),
    cfg.StrOpt(
        'user',
        help="""
User the helper runs as. Set it to the user QEMU runs as (``user`` in
``/etc/libvirt/qemu.conf``: ``libvirt-qemu`` on Debian and Ubuntu, ``qemu``
on CentOS and RHEL), with ``group`` and an empty ``capabilities``: every
kernel check the helper needs then passes for QEMU's processes and fails
for any other user's.

Possible values:

* Unset: the user the helper was started as (root through sudo), which
  needs ``CAP_SYS_PTRACE`` and cannot track cold pages (pages then move in
  address order).
* A user name.
""" + _RELATED + """* ``[numa_overhead_privileged] group``
* ``[numa_overhead_privileged] capabilities``
"""),
    cfg.StrOpt(
        'group',
        help="""
Group the helper runs as: QEMU's (``group`` in ``/etc/libvirt/qemu.conf``),
with ``user``.

Possible values:

* Unset: the group the helper was started with.
* A group name.
""" + _RELATED + """* ``[numa_overhead_privileged] user``
"""),
    cfg.Opt(
        'capabilities',
        type=types.List(types.String()),
        default=list(CAPABILITIES),
        help="""
Linux capabilities the helper keeps.

Possible values:

* Empty (``capabilities =``), with ``user`` and ``group`` set to QEMU's:
  none is needed (recommended).
* ``CAP_SYS_PTRACE`` (the default): what a helper running as root needs for
  move_pages(2) and ``/proc/<pid>/maps`` of QEMU running as another user. It
  also lets the helper read and write any process's memory.
* Another comma-separated list of capability names: none other is used
  (pages move with ``MPOL_MF_MOVE``, which needs no ``CAP_SYS_NICE``).
""" + _RELATED + """* ``[numa_overhead_privileged] user``
"""),
    cfg.IntOpt(
        'thread_pool_size',
        min=1,
        default=multiprocessing.cpu_count(),
        sample_default='multiprocessing.cpu_count()',
        help="""
Threads of the helper running requests at the same time.

Possible values:

* An integer >= 1; the default is the number of CPUs.
""" + _RELATED),
    cfg.StrOpt(
        'logger_name',
        default='oslo_privsep.daemon',
        help="""
Logger the helper's log lines go to in the agent's log.

Possible values:

* A Python logger name.
""" + _RELATED),
    cfg.BoolOpt(
        'log_daemon_traceback',
        default=False,
        help="""
Log the helper's traceback in the agent's log when a privileged call
fails.

Possible values:

* True or False.
""" + _RELATED),
]


CGROUP_GROUP = cfg.OptGroup(
    'numa_overhead_cgroups',
    title='NUMA overhead agent: privileged helper for cgroups',
    help="""
oslo.privsep options of the agent's second privileged helper, which
restricts a guest's memory nodes by writing ``cpuset.mems`` of its QEMU
threads' cgroups when ``[numa_overhead_agent] enforcement`` is ``nodeset``
or ``pages`` (for guests without ``<numatune>``, as Nova writes floating
guests), and the CPUs of its vCPU threads (``cpuset.cpus`` of their
cgroups) when the agent moves them. Those files belong to root: leave
``user`` and ``group`` unset so that it runs as root, with
``CAP_SYS_PTRACE`` to check that the process is the domain's QEMU and
``CAP_SYS_NICE`` to set its vCPU threads' affinity. It acts on a libvirt
domain's cgroups and threads and nothing else.
""")


def _cgroup_opts():
    opts = []
    for opt in OPTS:
        opt = copy.deepcopy(opt)
        if opt.name == 'user':
            opt.help = """
User the helper runs as.

Possible values:

* Unset (recommended): root, through sudo. The cgroup files it writes
  belong to root.
* A user name that may write ``/sys/fs/cgroup/machine*`` cgroups.

Related options:

* ``[numa_overhead_agent] enforcement``
* ``[numa_overhead_cgroups] group``
"""
        elif opt.name == 'group':
            opt.help = """
Group the helper runs as.

Possible values:

* Unset: the group the helper was started with.
* A group name.

Related options:

* ``[numa_overhead_cgroups] user``
"""
        elif opt.name == 'capabilities':
            opt.default = list(CGROUP_CAPABILITIES)
            opt.help = """
Linux capabilities the helper keeps.

Possible values:

* ``CAP_SYS_PTRACE,CAP_SYS_NICE`` (the default): the first to check that
  a process is the domain's QEMU (its ``exe`` link), the second to set
  the CPU affinity of QEMU's vCPU threads when the agent moves them
  (since Linux 6.2 a cpuset change keeps the CPUs a thread asked for
  itself, numad's or libvirt's pinning; without it such a move fails with
  one line saying so).
* Another comma-separated list of capability names.

Related options:

* ``[numa_overhead_agent] enforcement``
"""
        opts.append(opt)
    return opts


CGROUP_OPTS = _cgroup_opts()


def list_opts():
    return {GROUP: OPTS, CGROUP_GROUP: CGROUP_OPTS}
