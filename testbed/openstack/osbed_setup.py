"""Idempotently create the test bed's OpenStack objects.

Run with the venv's python and the admin credentials in OS_* variables:

    python osbed_setup.py keystone [SERVICE...]   # projects, users, catalog
    python osbed_setup.py neutron                 # external network 'public'
    python osbed_setup.py nova IMAGE_FILE         # flavors, image, AZ
    python osbed_setup.py tenant OUT_JSON         # the demo project's cluster network

The tenant phase (berth's addition) gives project 'demo' what a cluster needs:
network 'berth-net' with subnet 'berth-subnet' (10.0.0.0/24) and router
'berth-router' (gateway on 'public', interface on the subnet), and writes
their ids to OUT_JSON for the test harness and cloud.conf.

Every step looks first and creates only what is missing, so it can run on
every start.
"""
import os
import sys

import openstack

PASSWORD = os.environ.get('OSBED_PASSWORD', 'secret')
REGION = os.environ.get('OS_REGION_NAME', 'RegionOne')
AZ = os.environ.get('OSBED_AZ', 'zone-a')
COMPUTE_HOST = os.environ.get('OSBED_COMPUTE_HOST', 'osbed-compute-1')
HOST = '127.0.0.1'

# service name -> (type, url, which up.sh service needs it)
SERVICES = {
    'neutron': ('network', f'http://{HOST}:9696', 'neutron'),
    'octavia': ('load-balancer', f'http://{HOST}:9876', 'octavia'),
    'nova': ('compute', f'http://{HOST}:8774/v2.1', 'nova'),
    'placement': ('placement', f'http://{HOST}:8778', 'nova'),
    'glance': ('image', f'http://{HOST}:9292', 'nova'),
    'cinderv3': ('volumev3', f'http://{HOST}:8776/v3', 'cinder'),
    'cinder': ('block-storage', f'http://{HOST}:8776/v3', 'cinder'),
}
SERVICE_USERS = {'neutron': 'neutron', 'octavia': 'octavia', 'nova': 'nova',
                 'placement': 'nova', 'glance': 'nova', 'cinder': 'cinder'}


def log(msg):
    print(f'[osbed setup] {msg}', file=sys.stderr)


def setup_keystone(conn, wanted):
    idn = conn.identity
    domain = idn.find_domain('default')
    roles = {}
    for r in ('admin', 'member', 'reader', 'service',
              'load-balancer_member', 'load-balancer_admin',
              'load-balancer_observer', 'load-balancer_global_observer'):
        roles[r] = idn.find_role(r, ignore_missing=True)
        if roles[r] is None:
            roles[r] = idn.create_role(name=r)
            log(f'role {r} created')

    def project(name):
        p = idn.find_project(name, domain_id=domain.id, ignore_missing=True)
        if p is None:
            p = idn.create_project(name=name, domain_id=domain.id)
            log(f'project {name} created')
        return p

    def user(name, default_project=None):
        u = idn.find_user(name, domain_id=domain.id, ignore_missing=True)
        if u is None:
            kw = {'default_project_id': default_project.id} \
                if default_project else {}
            u = idn.create_user(name=name, password=PASSWORD,
                                domain_id=domain.id, **kw)
            log(f'user {name} created')
        return u

    def grant(proj, usr, role):
        if not idn.validate_user_has_project_role(proj, usr, roles[role]):
            idn.assign_project_role_to_user(proj, usr, roles[role])

    service = project('service')
    for svc, needed_by in SERVICE_USERS.items():
        if needed_by not in wanted:
            continue
        u = user(svc)
        grant(service, u, 'admin')
        grant(service, u, 'service')

    existing = {(s.name, s.type): s for s in idn.services()}
    endpoints = list(idn.endpoints())
    for name, (stype, url, needed_by) in SERVICES.items():
        if needed_by not in wanted:
            continue
        svc = existing.get((name, stype))
        if svc is None:
            svc = idn.create_service(name=name, type=stype)
            log(f'service {name} ({stype}) created')
        have = {e.interface: e for e in endpoints if e.service_id == svc.id}
        for iface in ('public', 'internal', 'admin'):
            ep = have.get(iface)
            if ep is None:
                idn.create_endpoint(service_id=svc.id, interface=iface,
                                    url=url, region_id=REGION)
            elif ep.url != url:
                idn.update_endpoint(ep, url=url)

    # a non-admin tenant for tests: member of 'demo'
    demo = project('demo')
    u = user('demo', demo)
    grant(demo, u, 'member')
    grant(demo, u, 'load-balancer_member')


def setup_neutron(conn):
    net = conn.network.find_network('public')
    if net is None:
        net = conn.network.create_network(
            name='public', is_router_external=True, is_shared=False,
            provider_network_type='flat',
            provider_physical_network='public')
        log('external network public created')
    if not list(conn.network.subnets(network_id=net.id)):
        # TEST-NET-3 (RFC 5737): nothing is ever sent to these addresses,
        # they are rows in neutron's database only.
        conn.network.create_subnet(
            name='public-subnet', network_id=net.id, ip_version=4,
            cidr='203.0.113.0/24', gateway_ip='203.0.113.1',
            allocation_pools=[{'start': '203.0.113.10',
                               'end': '203.0.113.250'}],
            is_dhcp_enabled=False)
        log('subnet public-subnet created')


def setup_nova(conn, image_file):
    for name, ram, vcpus, disk in (('m1.tiny', 512, 1, 1),
                                   ('m1.small', 2048, 1, 10),
                                   ('m1.medium', 4096, 2, 20)):
        if conn.compute.find_flavor(name, ignore_missing=True) is None:
            conn.compute.create_flavor(name=name, ram=ram, vcpus=vcpus,
                                       disk=disk, is_public=True)
            log(f'flavor {name} created')
    img = conn.image.find_image('osbed-tiny', ignore_missing=True)
    if img is not None and img.status != 'active':
        conn.image.delete_image(img)
        img = None
    if img is None:
        with open(image_file, 'rb') as f:
            conn.image.create_image(name='osbed-tiny', disk_format='raw',
                                    container_format='bare',
                                    visibility='public', data=f)
        log('image osbed-tiny created')
    if AZ and AZ != 'nova':
        agg = None
        for a in conn.compute.aggregates():
            if a.name == f'agg-{AZ}':
                agg = a
        if agg is None:
            agg = conn.compute.create_aggregate(name=f'agg-{AZ}',
                                                availability_zone=AZ)
            log(f'aggregate agg-{AZ} created')
        if COMPUTE_HOST not in (agg.hosts or []):
            conn.compute.add_host_to_aggregate(agg, COMPUTE_HOST)
            log(f'host {COMPUTE_HOST} added to AZ {AZ}')


def setup_tenant(conn, out_json):
    import json
    net_api = conn.network
    demo = conn.identity.find_project('demo', domain_id='default')
    public = net_api.find_network('public')
    net = net_api.find_network('berth-net', project_id=demo.id)
    if net is None:
        net = net_api.create_network(name='berth-net', project_id=demo.id)
        log('network berth-net created')
    subnet = net_api.find_subnet('berth-subnet', network_id=net.id)
    if subnet is None:
        # database rows only: nothing is ever sent to these addresses
        subnet = net_api.create_subnet(
            name='berth-subnet', network_id=net.id, project_id=demo.id,
            ip_version=4, cidr='10.0.0.0/24', gateway_ip='10.0.0.1',
            allocation_pools=[{'start': '10.0.0.10', 'end': '10.0.0.250'}])
        log('subnet berth-subnet created')
    router = net_api.find_router('berth-router', project_id=demo.id)
    if router is None:
        router = net_api.create_router(
            name='berth-router', project_id=demo.id,
            external_gateway_info={'network_id': public.id})
        log('router berth-router created')
    attached = [p for p in net_api.ports(device_id=router.id,
                                         network_id=net.id)]
    if not attached:
        net_api.add_interface_to_router(router, subnet_id=subnet.id)
        log('router berth-router attached to berth-subnet')
    # e2e tests run several hollow nodes at once: the default 10 instances is too few
    conn.set_compute_quotas(demo.id, instances=60, cores=120, ram=512000)
    # router_route (routes per router) is a quota in this Neutron, 30 by default: too few
    # for a 50-node cluster. openstacksdk drops the field, so the raw API sets it.
    conn.network.put(f'/quotas/{demo.id}', json={'quota': {
        'port': 500, 'floatingip': 100, 'security_group': 100, 'router': 20,
        'router_route': 1000}})
    with open(out_json, 'w') as f:
        json.dump({'project_id': demo.id, 'network_id': net.id,
                   'subnet_id': subnet.id, 'router_id': router.id,
                   'public_network_id': public.id,
                   'public_subnet_id': public.subnet_ids[0]}, f, indent=2)


def main():
    conn = openstack.connect(cloud=None)
    phase = sys.argv[1]
    if phase == 'keystone':
        setup_keystone(conn, set(sys.argv[2:]))
    elif phase == 'neutron':
        setup_neutron(conn)
    elif phase == 'nova':
        setup_nova(conn, sys.argv[2])
    elif phase == 'tenant':
        setup_tenant(conn, sys.argv[2])
    else:
        sys.exit(f'unknown phase {phase}')


if __name__ == '__main__':
    main()
