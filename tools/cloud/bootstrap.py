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
"""Bring-up steps of the one-machine cloud that talk to its APIs.

Run by tools/cloud/cloud.sh with the cloud's own Python (openstacksdk):

* ``accounts``: what devstack's create_*_accounts do once keystone is
  bootstrapped: the service project and a user per service (admin and
  service roles), a demo project and user, and a service and public
  endpoint per API;
* ``compute``: makes neutron's API worker ready for Nova's calls, waits
  for nova-compute to be up, maps it to cell1
  (``nova-manage cell_v2 discover_hosts``) and waits for its resource
  provider in placement.

One process for all of it: an ``openstack`` command per call would cost
seconds each on a 2-core machine.
"""

import argparse
import os
import shlex
import subprocess
import sys
import time

import openstack


def connect(args, password=None) -> openstack.connection.Connection:
    return openstack.connection.Connection(
        auth_url=args.auth_url, username='admin',
        password=password or args.admin_password, project_name='admin',
        user_domain_name='Default', project_domain_name='Default',
        region_name=args.region, identity_api_version='3')


def _role(identity, name):
    return identity.find_role(name) or identity.create_role(name=name)


def _project(identity, name, description):
    return identity.find_project(name, domain_id='default') or \
        identity.create_project(name=name, domain_id='default',
                                description=description)


def _user(identity, name, password, project):
    user = identity.find_user(name, domain_id='default')
    if user is None:
        user = identity.create_user(name=name, password=password,
                                    domain_id='default',
                                    default_project_id=project.id)
    return user


def accounts(args) -> int:
    conn = connect(args)
    identity = conn.identity
    roles = {name: _role(identity, name)
             for name in ('admin', 'service', 'member', 'reader')}
    service_project = _project(identity, 'service', 'Service users')
    demo_project = _project(identity, 'demo', 'A project to try it in')
    for spec in args.endpoint:
        service_type, name, url = spec.split('=', 2)
        user = _user(identity, name, args.service_password, service_project)
        for role in ('admin', 'service'):
            identity.assign_project_role_to_user(service_project, user,
                                                 roles[role])
        service = identity.create_service(name=name, type=service_type,
                                          description=name)
        identity.create_endpoint(service_id=service.id, interface='public',
                                 url=url, region_id=args.region)
        print('%-10s %-10s %s' % (service_type, name, url))
    demo = _user(identity, 'demo', args.demo_password, demo_project)
    identity.assign_project_role_to_user(demo_project, demo,
                                         roles['member'])
    identity.assign_project_role_to_user(demo_project, demo, roles['reader'])
    return 0


def _wait(what, check, timeout, interval=2.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except Exception as exc:  # an API still starting
            result = None
            last = exc
        else:
            last = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit('cloud: timed out waiting for %s%s' % (
                what, ': %s' % last if last else ''))
        time.sleep(interval)


def compute(args) -> int:
    conn = connect(args, password=os.environ.get('OS_PASSWORD'))

    # Neutron 29's API worker fails its first request if that request is
    # a port list (Port.port_forwardings exists only once SQLAlchemy has
    # configured its mappers, which any other query does first); Nova's
    # first call to neutron is such a list. A network list first.
    _wait('neutron to list networks', lambda: list(
        conn.network.networks()) is not None, args.timeout)

    def service_up():
        return [s for s in conn.compute.services(binary='nova-compute')
                if s.host == args.host and s.state == 'up']

    _wait('nova-compute on %s to be up' % args.host, service_up,
          args.timeout)

    def mapped():
        # nova-manage's output (and eventlet's deprecation warning) only
        # when it fails.
        result = subprocess.run(shlex.split(args.discover),
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError('discover_hosts exited %d: %s' % (
                result.returncode, result.stderr.strip()[-500:]))
        return list(conn.compute.hypervisors())

    hypervisors = _wait('the hypervisor of %s' % args.host, mapped,
                        args.timeout, interval=3.0)
    _wait('its resource provider in placement',
          lambda: list(conn.placement.resource_providers()), args.timeout)
    for hv in hypervisors:
        print('hypervisor %s (%s)' % (hv.name, hv.id))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)
    acc = sub.add_parser('accounts')
    acc.add_argument('--service-password', required=True)
    acc.add_argument('--demo-password', required=True)
    acc.add_argument('--endpoint', action='append', default=[],
                     metavar='TYPE=NAME=URL')
    comp = sub.add_parser('compute')
    comp.add_argument('--host', required=True)
    comp.add_argument('--timeout', type=float, default=180)
    comp.add_argument('--discover', required=True,
                      help='the nova-manage cell_v2 discover_hosts command')
    for p in (acc, comp):
        p.add_argument('--auth-url', default=os.environ.get('OS_AUTH_URL'))
        p.add_argument('--admin-password',
                       default=os.environ.get('OS_PASSWORD'))
        p.add_argument('--region', default='RegionOne')
    args = parser.parse_args(argv)
    return accounts(args) if args.command == 'accounts' else compute(args)


if __name__ == '__main__':
    sys.exit(main())
