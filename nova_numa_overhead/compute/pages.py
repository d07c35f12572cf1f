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
"""Which pages to move: the bridge from "move N MiB of this guest from node
A to node B" to move_pages(2) on QEMU's address space.

The guest's RAM is QEMU's large anonymous mappings
(:func:`~nova_numa_overhead.compute.numa_stat.guest_ram_ranges`). The
picker walks them in windows, asks the kernel where each page is and takes
the pages that lie on the source node until it has enough, then moves them
through the privileged helper. Pages the kernel refuses to move stay where
they were and are counted by errno.
"""

import errno
import os

from oslo_log import log as logging

from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import numa_stat

LOG = logging.getLogger(__name__)
WINDOW_PAGES = 4096
# A pick looks for cold pages among up to this many times the pages it
# wants, then takes warm ones: a bounded scan, not the whole guest.
COLD_SCAN = 8
MIB = 1024 * 1024
PAGE_SIZE = os.sysconf('SC_PAGE_SIZE')


class PageMover:
    """``mover(domain, moves, max_pages) -> MoveResult`` for a backend.

    ``domain`` is a tuple passed as the leading arguments of every helper
    call: the libvirt domain's ``(name, uuid)`` for the privileged helper,
    which finds and checks the domain's QEMU itself
    (:mod:`nova_numa_overhead.compute.privsep`); tests give ``(pid,)``
    with helpers of their own.
    """

    def __init__(self, read_maps=None, page_nodes=None, move_pages=None,
                 cold_pages=None, track_pages=None, batch_pages: int = 1024):
        if read_maps is None or page_nodes is None or move_pages is None:
            # The privileged helper: QEMU runs as another user.
            from nova_numa_overhead.compute import privsep
            read_maps = read_maps or privsep.read_maps
            page_nodes = page_nodes or privsep.page_nodes
            move_pages = move_pages or privsep.move_pages
            cold_pages = cold_pages or privsep.cold_pages
            track_pages = track_pages or privsep.track_pages
        self.read_maps = read_maps
        self.page_nodes = page_nodes
        self.move_pages = move_pages
        # Optional: which pages were not used recently (coldpages).
        self.cold_pages = cold_pages
        self.track_pages = track_pages
        self.batch_pages = batch_pages

    def ranges(self, domain: tuple) -> list:
        texts = self.read_maps(*domain)
        if texts is None:
            raise hv_mod.DomainGone('%s is gone' % (domain[0],))
        ranges = numa_stat.numa_maps_ranges(texts['numa_maps'])
        return numa_stat.guest_ram_ranges(
            numa_stat.with_extents(ranges, texts['maps']))

    def pick(self, domain: tuple, ranges, node: int, pages: int) -> list:
        """Up to ``pages`` addresses of pages now on ``node``, cold first.

        Cold: not used since the last period (the swap FIFO's candidates),
        looked for over up to ``COLD_SCAN`` times the pages asked so that
        a large guest's scan stays bounded; then the others in address
        order.
        """
        cold, warm = [], []
        seen = 0
        limit = pages * COLD_SCAN
        for rng in ranges:
            if rng.end is None or not rng.pages.get(node):
                continue
            for start in range(rng.start, rng.end,
                               WINDOW_PAGES * rng.page_size):
                window = list(range(start, min(rng.end, start +
                                               WINDOW_PAGES * rng.page_size),
                                    rng.page_size))
                where = self.page_nodes(*domain, window)
                on_node = [a for a, n in zip(window, where) if n == node]
                found = self._cold(domain, on_node)
                if found is None:
                    # The kernel cannot tell: no use looking further.
                    limit, found = pages, ()
                cold.extend(found)
                found = set(found)
                others = [a for a in on_node if a not in found]
                warm.extend(others[:max(0, pages - len(warm))])
                seen += len(on_node)
                if len(cold) >= pages or seen >= limit:
                    return (cold + warm)[:pages]
        return (cold + warm)[:pages]

    def _cold(self, domain, addresses):
        """Those of ``addresses`` not used since the last period; None
        when that cannot be told.
        """
        if self.cold_pages is None:
            return None
        if not addresses:
            return []
        return self.cold_pages(*domain, addresses)

    def restart_tracking(self, domain: tuple, ranges) -> None:
        """Begin the next period of cold-page tracking.

        One helper call for the whole guest, with the ``(start, end,
        page_size)`` of its RAM ranges: their addresses, millions for a
        large guest, would cross the privsep channel for nothing.
        """
        if self.track_pages is None:
            return
        extents = [(rng.start, rng.end, rng.page_size) for rng in ranges
                   if rng.end is not None]
        if not extents:
            return
        started = self.track_pages(*domain, extents)
        if isinstance(started, dict) and not started.get('mode'):
            self._no_tracking(started.get('error') or 'unknown reason')

    def _no_tracking(self, why: str) -> None:
        """Step aside, once: pages move in address order from now on."""
        LOG.warning('Cold-page tracking is not available (%s): pages move '
                    'in address order. Run the privileged helper as QEMU\'s '
                    'user to use it (see the deployment guide).', why)
        self.cold_pages = self.track_pages = None

    def __call__(self, domain: tuple, moves, max_pages
                 ) -> hv_mod.MoveResult:
        try:
            return self._move(domain, moves, max_pages)
        except hv_mod.HypervisorError:
            raise
        except OSError as exc:
            # move_pages(2) or /proc as a whole (MoveError is an OSError):
            # the process exited, or the helper may not touch it.
            if exc.errno == errno.ESRCH:
                raise hv_mod.DomainGone('%s: QEMU exited' % (domain[0],))
            raise hv_mod.HypervisorError(
                'page moves of %s failed: %s' % (domain[0], exc)) from exc
        except Exception as exc:
            if not hv_mod.helper_not_started(exc):
                raise
            raise hv_mod.HypervisorError(
                'page moves of %s: the privileged helper '
                '[numa_overhead_privileged] did not start (%s); check its '
                'helper_command and the sudoers or rootwrap rule (see the '
                'deployment guide)' % (domain[0], exc)) from exc

    def _move(self, domain, moves, max_pages) -> hv_mod.MoveResult:
        if (max_pages is not None and max_pages <= 0) or not any(
                mb > 0 for _src, _dst, mb in moves):
            # Nothing to move: neither QEMU's mappings read nor its
            # clear_refs written (that drops every mapping of the guest's
            # memory for KVM to fault in again).
            return hv_mod.MoveResult(requested=0, moved=0)
        try:
            ranges = self.ranges(domain)
        except (KeyError, ValueError) as exc:
            raise hv_mod.HypervisorError('cannot read the mappings of %s: '
                                         '%s' % (domain[0], exc))
        requested = moved = 0
        failed = {}
        budget = max_pages
        error = None
        try:
            for src, dst, mb in moves:
                want = int(mb * MIB // PAGE_SIZE)
                if budget is not None:
                    want = min(want, budget - requested)
                if want <= 0:
                    break
                addresses = self.pick(domain, ranges, src, want)
                if not addresses:
                    continue
                result = self.move_pages(*domain, addresses, dst,
                                         self.batch_pages)
                requested += result['requested']
                moved += result['moved']
                for name, count in result['failed'].items():
                    failed[name] = failed.get(name, 0) + count
            if requested:
                # Only after pages moved: each restart costs the guest.
                self.restart_tracking(domain, ranges)
        except Exception as exc:
            if not requested:
                raise
            error = exc
        if error is not None:
            # Pages moved before it failed: counted (the budget they took,
            # the progress they made), not lost with the error.
            LOG.warning('Page moves of %(guest)s stopped after %(moved)d '
                        'of %(requested)d pages: %(error)s',
                        {'guest': domain[0], 'moved': moved,
                         'requested': requested, 'error': error})
        return hv_mod.MoveResult(requested=requested, moved=moved,
                                 failed=failed)
