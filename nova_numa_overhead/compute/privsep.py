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
"""The agent's privileged helper: moving guest pages.

Since Linux 4.13 move_pages(2) on another process is governed by a ptrace
PTRACE_MODE_READ_REALCREDS check (move_pages(2), ptrace(2)), not by
CAP_SYS_NICE: the caller needs the target's uid AND a superset of its
capabilities, or CAP_SYS_PTRACE. QEMU runs as another user (and the daemon
has dropped root's other capabilities), so the helper keeps CAP_SYS_PTRACE;
checked on Linux 6.18: with CAP_SYS_NICE alone the call fails with EPERM
both for a root and for an unprivileged target. CAP_SYS_NICE is kept as
well, for MPOL_MF_MOVE_ALL (pages the guest shares with another process,
e.g. vhost-user). The same ptrace check guards ``/proc/<pid>/numa_maps``
and ``maps``, hence :func:`read_maps`. The context is declared like
nova.privsep's and os-vif's vif_plug_ovs.privsep.

Entrypoints run in the daemon and their results travel back over msgpack:
they take and return plain data (ints, lists, dicts), and a
:class:`~nova_numa_overhead.compute.mover.MoveError` is re-raised on the
caller's side with its errno and message.
"""

import os

from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

from nova_numa_overhead.compute import coldpages
from nova_numa_overhead.compute import mover

numa_overhead_pctxt = priv_context.PrivContext(
    'nova_numa_overhead',
    cfg_section='numa_overhead_privileged',
    pypath=__name__ + '.numa_overhead_pctxt',
    capabilities=[caps.CAP_SYS_NICE, caps.CAP_SYS_PTRACE],
)


@numa_overhead_pctxt.entrypoint
def move_pages(pid: int, addresses: list, target_node: int,
               max_batch_pages: int) -> dict:
    """Move pages of ``pid`` to ``target_node``, unthrottled.

    Returns ``{'requested': n, 'moved': n, 'failed': {errno name: n}}``.
    The caller throttles by sizing its calls: the daemon is shared and
    must not sleep on anyone's behalf.
    """
    result = mover.PageMover(max_batch_pages=max_batch_pages,
                             rate_mb_per_s=0).move(pid, addresses,
                                                   target_node)
    return {'requested': result.requested, 'moved': result.moved,
            'failed': dict(result.failed)}


@numa_overhead_pctxt.entrypoint
def query_pages(pid: int, addresses: list) -> dict:
    """Node id -> how many of these pages of ``pid`` are on it."""
    return mover.PageMover(rate_mb_per_s=0).query(pid, addresses)


@numa_overhead_pctxt.entrypoint
def page_nodes(pid: int, addresses: list) -> list:
    """The node of each page of ``pid`` (negative errno where none)."""
    return mover.move_pages(pid, addresses, None)


@numa_overhead_pctxt.entrypoint
def track_pages(pid: int, addresses: list) -> str | None:
    """Start a cold-page tracking period (see coldpages.start)."""
    return coldpages.start(pid, addresses)


@numa_overhead_pctxt.entrypoint
def cold_pages(pid: int, addresses: list) -> list | None:
    """Pages of ``pid`` not used since track_pages; None if unknown."""
    return coldpages.cold(pid, addresses)


@numa_overhead_pctxt.entrypoint
def read_maps(pid: int) -> dict | None:
    """The text of ``/proc/<pid>/numa_maps`` and ``maps``; None if gone.

    Returned as text and parsed by the caller
    (:func:`nova_numa_overhead.compute.numa_stat.numa_maps_ranges`,
    :func:`~nova_numa_overhead.compute.numa_stat.with_extents`), so that
    the daemon does as little as possible.
    """
    texts = {}
    for name in ('numa_maps', 'maps'):
        try:
            with open(os.path.join('/proc', str(int(pid)), name),
                      encoding='utf-8', errors='replace') as f:
                texts[name] = f.read()
        except OSError:
            return None
    return texts
