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
"""Domain XML as Nova's libvirt driver writes it, for libvirt's test driver.

The ``<nova:instance>`` metadata follows Nova 34's
``LibvirtConfigGuestMetaNova*`` classes (namespace
``http://openstack.org/xmlns/libvirt/nova/1.1``); the rest is the subset
of a Nova guest that the agent looks at (memory, vcpus, cputune,
numatune, memoryBacking), in a form ``test:///default`` accepts (domain
type 'test', i686 hvm).
"""

import uuid as uuid_mod
from xml.sax import saxutils

NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'


def _metadata(name: str, memory_mb, vcpus, extra_specs) -> str:
    specs = ''
    if extra_specs is not None:
        specs = '<nova:extraSpecs>%s</nova:extraSpecs>' % ''.join(
            '<nova:extraSpec name=%s>%s</nova:extraSpec>'
            % (saxutils.quoteattr(key), saxutils.escape(str(value)))
            for key, value in sorted(extra_specs.items()))
    return (
        '<metadata>'
        '<nova:instance xmlns:nova="%(ns)s">'
        '<nova:package version="34.0.0"/>'
        '<nova:name>%(name)s</nova:name>'
        '<nova:creationTime>2025-01-01 00:00:00</nova:creationTime>'
        '<nova:flavor name="m1.test" id="1">'
        '<nova:memory>%(memory)s</nova:memory>'
        '<nova:disk>1</nova:disk>'
        '<nova:swap>0</nova:swap>'
        '<nova:ephemeral>0</nova:ephemeral>'
        '<nova:vcpus>%(vcpus)s</nova:vcpus>'
        '%(specs)s'
        '</nova:flavor>'
        '<nova:owner>'
        '<nova:user uuid="u1">demo</nova:user>'
        '<nova:project uuid="p1">demo</nova:project>'
        '</nova:owner>'
        '<nova:root type="image" uuid="00000000-0000-0000-0000-000000000001"/>'
        '</nova:instance>'
        '</metadata>'
        % {'ns': NOVA_NS, 'name': saxutils.escape(name),
           'memory': memory_mb, 'vcpus': vcpus, 'specs': specs})


def nova_domain_xml(name: str, uuid: str, memory_mb: int, vcpus: int,
                    extra_specs: dict | None, pinned: bool = False,
                    nodeset: str | None = None,
                    garbage_metadata: bool = False,
                    nova_metadata: bool = True,
                    hugepages: bool = False,
                    nodeset_mode: str = 'strict') -> str:
    """Domain XML of a Nova guest.

    ``extra_specs=None`` leaves out ``<nova:extraSpecs>`` (older Nova).
    ``pinned`` adds what Nova writes for a guest with a NUMA topology and
    dedicated CPUs: vcpupin/emulatorpin (vCPU i on host CPU i), a guest
    NUMA cell and strict numatune with a memnode on ``nodeset`` (default
    '0'). Otherwise ``nodeset`` gives a plain ``<numatune>`` in
    ``nodeset_mode``. ``garbage_metadata`` writes a flavor whose
    memory and vcpus are not integers and an extra spec without a name.
    """
    if garbage_metadata:
        metadata = _metadata(name, 'lots', 'many', None).replace(
            '</nova:vcpus>',
            '</nova:vcpus><nova:extraSpecs>'
            '<nova:extraSpec>orphan</nova:extraSpec></nova:extraSpecs>')
    elif nova_metadata:
        metadata = _metadata(name, memory_mb, vcpus, extra_specs)
    else:
        metadata = ''
    cputune = numatune = cpu = backing = ''
    if pinned:
        cells = nodeset or '0'
        cputune = '<cputune>%s<emulatorpin cpuset="0-%d"/></cputune>' % (
            ''.join('<vcpupin vcpu="%d" cpuset="%d"/>' % (i, i)
                    for i in range(vcpus)), vcpus - 1)
        numatune = (
            '<numatune><memory mode="strict" nodeset="%s"/>'
            '<memnode cellid="0" mode="strict" nodeset="%s"/></numatune>'
            % (cells, cells))
        cpu = ('<cpu><numa><cell id="0" cpus="0-%d" memory="%d" unit="KiB"/>'
               '</numa></cpu>' % (vcpus - 1, memory_mb * 1024))
    elif nodeset is not None:
        numatune = ('<numatune><memory mode="%s" nodeset="%s"/>'
                    '</numatune>' % (nodeset_mode, nodeset))
    if hugepages:
        backing = ('<memoryBacking><hugepages>'
                   '<page size="2048" unit="KiB"/></hugepages>'
                   '</memoryBacking>')
    return (
        "<domain type='test'>"
        '<name>%(name)s</name>'
        '<uuid>%(uuid)s</uuid>'
        '%(metadata)s'
        "<memory unit='KiB'>%(kib)d</memory>"
        "<currentMemory unit='KiB'>%(kib)d</currentMemory>"
        '%(backing)s'
        "<vcpu placement='static'>%(vcpus)d</vcpu>"
        '%(cputune)s'
        '%(numatune)s'
        "<os><type arch='i686'>hvm</type><boot dev='hd'/></os>"
        '%(cpu)s'
        '<devices/>'
        '</domain>'
        % {'name': saxutils.escape(name), 'uuid': uuid, 'metadata': metadata,
           'kib': memory_mb * 1024, 'backing': backing, 'vcpus': vcpus,
           'cputune': cputune, 'numatune': numatune, 'cpu': cpu})


def start_guest(test, conn, memory_mb: int = 512, vcpus: int = 2,
                extra_specs=None, start: bool = True, **kwargs):
    """Define (and start) a Nova-style guest; removed after the test."""
    name = 'instance-%s' % uuid_mod.uuid4().hex[:8]
    xml = nova_domain_xml(name, str(uuid_mod.uuid4()), memory_mb, vcpus,
                          {} if extra_specs is None else extra_specs,
                          **kwargs)
    dom = conn.defineXML(xml)
    test.addCleanup(remove_guest, conn, name)
    if start:
        dom.create()
    return dom


def remove_guest(conn, name: str) -> None:
    """Destroy and undefine a guest, if it is still there."""
    import libvirt
    try:
        dom = conn.lookupByName(name)
    except libvirt.libvirtError:
        return
    if dom.isActive():
        dom.destroy()
    dom.undefine()
