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

"""Functional test harness for nova-numa-overhead.

Runs the real nova-api (WSGI app through wsgi-intercept), nova-conductor,
nova-scheduler and placement in-process, plus several nova-compute services
backed by nova's fake libvirt driver, each exposing a multi-cell NUMA
topology. Everything talks over oslo.messaging's in-memory ``fake://``
transport, exactly as nova's own functional tests do.

Import order matters: ``nova.tests.functional`` must be imported before any
module that pulls in ``urllib3`` or ``oslo_context`` (``nova.conf``,
``oslo_messaging``, ...), because its ``__init__`` applies eventlet monkey
patching; if ``OS_NOVA_DISABLE_EVENTLET_PATCHING`` is set it instead switches
nova to native threads and forbids importing eventlet. Test modules should
start with the same ``import nova.tests.functional`` line as this one.
"""

import nova.tests.functional  # noqa: F401 - must be first, see docstring

import os
import sys
import sysconfig
import time
from typing import Any

from nova import conf
from nova.conf import scheduler as scheduler_conf
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base as libvirt_base

CONF = conf.CONF

#: The filters nova enables when ``[filter_scheduler] enabled_filters`` is
#: not set (nova 34 defaults), read from the option definition itself.
NOVA_DEFAULT_FILTERS: list[str] = list(next(
    opt.default for opt in scheduler_conf.filter_scheduler_opts
    if opt.name == 'enabled_filters'))

#: Entry in ``available_filters`` that loads every in-tree nova filter.
NOVA_ALL_FILTERS = 'nova.scheduler.filters.all_filters'

#: Entry in ``weight_classes`` that loads every in-tree nova weigher.
NOVA_ALL_WEIGHERS = 'nova.scheduler.weights.all_weighers'


def find_api_paste_config() -> str | None:
    """Locate nova's ``api-paste.ini`` for the running interpreter.

    nova's ``ConfFixture`` defaults ``[wsgi] api_paste_config`` to
    ``$state_path/etc/nova/api-paste.ini``, with ``$state_path`` being the
    directory *containing* the ``nova`` package. That only exists in a source
    checkout; the nova wheel installs the file as data under
    ``<prefix>/etc/nova/api-paste.ini`` instead.

    :returns: Absolute path of the file, or None if it cannot be found.
    """
    candidates = [
        os.path.join(sysconfig.get_path('data'), 'etc', 'nova'),
        os.path.join(sys.prefix, 'etc', 'nova'),
        os.path.join(sys.base_prefix, 'etc', 'nova'),
        '/usr/local/etc/nova',
        '/etc/nova',
    ]
    for directory in candidates:
        path = os.path.join(directory, 'api-paste.ini')
        if os.path.isfile(path):
            return path
    return None


class NUMAOverheadFunctionalBase(libvirt_base.ServersTestBase):
    """Base class for functional tests of nova-numa-overhead.

    ``setUp`` starts conductor, scheduler, placement, the API and one fake
    libvirt compute per name in ``COMPUTE_HOSTNAMES``. Subclasses tune the
    environment through the class attributes below; all scheduler options
    are applied with ``self.flags()`` before the scheduler starts, because
    nova's ``HostManager`` loads filters and weighers only once, at start.

    Example::

        class TestMyFilter(base.NUMAOverheadFunctionalBase):
            EXTRA_FILTERS = ['MyFilter']
            EXTRA_FILTER_PATHS = ['nova_numa_overhead.scheduler.MyFilter']

            def test_it(self):
                flavor = self.create_flavor_with_specs({'hw:numa_nodes': '2'})
                server = self.boot(flavor, hints={'foo': 'bar'})
                self.assertEqual('host1', self.host_of(server))
    """

    #: Names of the fake libvirt compute hosts to start.
    COMPUTE_HOSTNAMES: tuple[str, ...] = ('host1', 'host2', 'host3')

    #: NUMA cells per compute host (``HostInfo(cpu_nodes=...)``).
    NUMA_CELLS_PER_HOST: int = 2

    #: Physical cores per NUMA cell (one socket per cell).
    CPU_CORES_PER_CELL: int = 2

    #: Hardware threads per core.
    CPU_THREADS_PER_CORE: int = 2

    #: Total host memory in KiB, split evenly across the NUMA cells.
    HOST_MEMORY_KB: int = 16 * 1024 * 1024

    #: Filters enabled before ``EXTRA_FILTERS``; None means nova's defaults.
    BASE_FILTERS: list[str] | None = None

    #: Extra filter class names (bare names) appended to the enabled filters.
    EXTRA_FILTERS: list[str] = []

    #: Extra filter class paths added to ``available_filters`` (next to
    #: nova's ``all_filters``); needed for any out-of-tree filter.
    EXTRA_FILTER_PATHS: list[str] = []

    #: ``[filter_scheduler] weight_classes``: weigher class paths or
    #: functions returning weigher classes.
    WEIGHT_CLASSES: list[str] = [NOVA_ALL_WEIGHERS]

    #: Extra ``[filter_scheduler]`` options, e.g. weigher multipliers.
    SCHEDULER_FLAGS: dict[str, Any] = {}

    #: Upper bound, in seconds, for the wait helpers.
    WAIT_TIMEOUT: float = 60.0

    # Use the newest microversion for both the project and the admin client
    # so flavor extra specs are validated (2.86+) like in a modern cloud.
    microversion = 'latest'

    # Keep real RPC semantics: casts stay asynchronous and fanout casts reach
    # every listener. nova's CastAsCallFixture (its default) turns every
    # cast, fanout included, into a call to a single server, which then
    # raises MessagingTimeout if nothing listens on the topic.
    CAST_AS_CALL = False

    def setUp(self) -> None:
        super().setUp()
        for hostname in self.COMPUTE_HOSTNAMES:
            self.start_compute(
                hostname=hostname, host_info=self.host_info_for(hostname))

    # -- service setup hooks called by nova's _IntegratedTestBase ----------

    def _setup_services(self) -> None:
        self._configure_api_paste()
        super()._setup_services()

    def _setup_scheduler_service(self):
        self.flags(group='filter_scheduler', **self.scheduler_flags())
        return self.start_service('scheduler')

    def _configure_api_paste(self) -> None:
        if os.path.isfile(CONF.wsgi.api_paste_config):
            return
        path = find_api_paste_config()
        if path is None:
            self.fail('Cannot find nova api-paste.ini (looked next to the '
                      'nova package and under <prefix>/etc/nova)')
        self.flags(api_paste_config=path, group='wsgi')

    # -- configuration ----------------------------------------------------

    def scheduler_flags(self) -> dict[str, Any]:
        """Return the ``[filter_scheduler]`` options this test runs with."""
        base = (NOVA_DEFAULT_FILTERS if self.BASE_FILTERS is None
                else self.BASE_FILTERS)
        enabled = list(base) + [
            f for f in self.EXTRA_FILTERS if f not in base]
        flags: dict[str, Any] = {
            'enabled_filters': enabled,
            'available_filters': [NOVA_ALL_FILTERS] + list(
                self.EXTRA_FILTER_PATHS),
            'weight_classes': list(self.WEIGHT_CLASSES),
        }
        flags.update(self.SCHEDULER_FLAGS)
        return flags

    def host_info_for(self, hostname: str) -> fakelibvirt.HostInfo:
        """Return the fake libvirt host description for ``hostname``.

        Override to give hosts different shapes. nova's libvirt test base
        mocks ``Host.get_online_cpus`` to 16 CPUs, so a host must have fewer
        than 16 CPUs.
        """
        return fakelibvirt.HostInfo(
            cpu_nodes=self.NUMA_CELLS_PER_HOST,
            cpu_sockets=1,
            cpu_cores=self.CPU_CORES_PER_CELL,
            cpu_threads=self.CPU_THREADS_PER_CORE,
            kB_mem=self.HOST_MEMORY_KB)

    # -- API helpers ------------------------------------------------------

    def create_flavor_with_specs(
        self, extra_specs: dict[str, str], vcpus: int = 2,
        ram_mb: int = 2048, disk: int = 10,
    ) -> str:
        """Create a public flavor with extra specs through the admin API.

        :returns: The flavor ID.
        :raises: ``OpenStackApiException`` if the API rejects a spec (from
            microversion 2.86 nova validates specs in known namespaces).
        """
        body = self._build_flavor(
            memory_mb=ram_mb, vcpu=vcpus, disk=disk, ephemeral=0)
        flavor = self.admin_api.post_flavor(body)
        if extra_specs:
            self.admin_api.post_extra_spec(
                flavor['id'], {'extra_specs': dict(extra_specs)})
        return flavor['id']

    def boot(
        self, flavor_id: str, hints: dict[str, Any] | None = None,
        expected_state: str = 'ACTIVE', name: str | None = None,
    ) -> dict[str, Any]:
        """Boot a server as the project user and wait until it settles.

        :param flavor_id: Flavor to boot with.
        :param hints: Scheduler hints sent as ``os:scheduler_hints``.
        :param expected_state: ``ACTIVE`` or ``ERROR``; the test fails if the
            server ends up in the other state.
        :param name: Optional server name.
        :returns: The server as the admin API shows it (so it includes
            ``OS-EXT-SRV-ATTR:host`` and, for ERROR, ``fault``).
        """
        server = self._build_server(
            name=name, flavor_id=flavor_id, networks='none')
        body: dict[str, Any] = {'server': server}
        if hints:
            body['os:scheduler_hints'] = dict(hints)
        created = self.api.post_server(body)
        return self.wait_for_server_status(created['id'], expected_state)

    def wait_for_server_status(
        self, server_id: str, expected_state: str = 'ACTIVE',
    ) -> dict[str, Any]:
        """Wait for a server to reach ACTIVE or ERROR; assert which one.

        An ERROR server is only returned once its ``fault`` is recorded,
        since nova sets the state before it writes the fault.
        """
        deadline = time.monotonic() + self.WAIT_TIMEOUT
        while True:
            server = self.admin_api.get_server(server_id)
            status = server['status']
            if status == 'ACTIVE' or (status == 'ERROR' and 'fault' in server):
                break
            if time.monotonic() > deadline:
                self.fail(f'Server {server_id} still {status} after '
                          f'{self.WAIT_TIMEOUT}s')
            time.sleep(0.1)
        if status != expected_state:
            self.fail(f'Server {server_id} is {status}, expected '
                      f'{expected_state}; fault: {server.get("fault")}')
        return server

    def host_of(self, server: dict[str, Any]) -> str | None:
        """Return the compute hostname a server runs on (None if none)."""
        return self.admin_api.get_server(server['id'])[
            'OS-EXT-SRV-ATTR:host']

    def create_aggregate(
        self, name: str, hosts: list[str] | tuple[str, ...] = (),
        metadata: dict[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Create a host aggregate through the admin API.

        Hosts are added and metadata set with the aggregate actions, and the
        call returns once the scheduler's ``HostManager`` has received the
        resulting ``update_aggregates`` fanout, so a following boot sees it.

        :returns: The aggregate as returned by the API.
        """
        agg = self.admin_api.post_aggregate({'aggregate': {'name': name}})
        for host in hosts:
            agg = self.admin_api.add_host_to_aggregate(agg['id'], host).body[
                'aggregate']
        if metadata:
            agg = self.admin_api.post_aggregate_action(
                agg['id'], {'set_metadata': {'metadata': dict(metadata)}})
        self.wait_for_scheduler_aggregate(agg)
        return agg

    def wait_for_scheduler_aggregate(self, agg: dict[str, Any]) -> None:
        """Wait until the scheduler's view of an aggregate matches ``agg``."""
        host_manager = self.scheduler.manager.host_manager
        want_hosts = set(agg['hosts'] or [])
        want_meta = dict(agg['metadata'] or {})
        deadline = time.monotonic() + self.WAIT_TIMEOUT
        while True:
            seen = host_manager.aggs_by_id.get(agg['id'])
            if (seen is not None and set(seen.hosts) == want_hosts and
                    dict(seen.metadata) == want_meta):
                return
            if time.monotonic() > deadline:
                self.fail(f'Scheduler did not receive aggregate {agg}')
            time.sleep(0.05)

    @property
    def host_manager(self):
        """The running scheduler's ``nova.scheduler.host_manager``."""
        return self.scheduler.manager.host_manager
