#!/usr/bin/env python3
"""Generates the synthetic hwloc 2.x XML topologies the placement tests read.

Shapes (after AWS's published instance layouts): every GPU sits below a PCIe switch of its own
(p5, p5en) or shared with another GPU (p4d), with that switch's EFA NICs beside it.
  p5.48xlarge-like: 2 NUMA nodes x 48 cores (2 threads each), 8 H100, 32 EFA (4 per GPU switch)
  p5en-like:        2 NUMA nodes x 48 cores (2 threads each), 8 H200, 16 EFA (2 per GPU switch)
  p4d-like:         2 NUMA nodes x 24 cores (2 threads each), 8 A100, 4 EFA (1 per 2-GPU switch)
  single-numa:      1 NUMA node x 8 cores, 2 GPUs, no NIC at all
The AWS-like hosts also have an ENA management NIC (Ethernet, not RDMA) on NUMA node 0.
Run from this folder: python3 gen.py  (rewrites the .xml files).
"""


class Gen:
    def __init__(self):
        self.gp = 0
        self.out = []

    def gpi(self):
        self.gp += 1
        return self.gp

    def line(self, depth, text):
        self.out.append("  " * depth + text)


def mask(bits):
    """hwloc's bitmap text: 32-bit words, most significant first, comma-separated."""
    v = 0
    for b in bits:
        v |= 1 << b
    words = []
    while True:
        words.append(v & 0xffffffff)
        v >>= 32
        if v == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


def pci_type(cls, vendor, device):
    return f'{cls:04x} [{vendor:04x}:{device:04x}] [{vendor:04x}:0000] 00'


def machine(name, sockets, cores, switches, ena=True):
    """switches: per socket, a list of switches; a switch is a list of ('gpu'|'efa', dev id)."""
    g = Gen()
    threads = 2 if cores > 8 else 1
    ncpu = sockets * cores * threads
    g.line(0, '<?xml version="1.0" encoding="UTF-8"?>')
    g.line(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    g.line(0, '<topology version="2.0">')
    allc, alln = mask(range(ncpu)), mask(range(sockets))
    g.line(1, f'<object type="Machine" os_index="0" cpuset="{allc}" complete_cpuset="{allc}" '
              f'allowed_cpuset="{allc}" nodeset="{alln}" complete_nodeset="{alln}" '
              f'allowed_nodeset="{alln}" gp_index="{g.gpi()}">')
    g.line(2, f'<info name="Synthetic" value="{name}"/>')
    bus = 0x10
    rdma = 0
    for s in range(sockets):
        pus = [s * cores + c for c in range(cores)]
        if threads == 2:
            pus += [sockets * cores + s * cores + c for c in range(cores)]
        cs, ns = mask(pus), mask([s])
        g.line(2, f'<object type="Package" os_index="{s}" cpuset="{cs}" complete_cpuset="{cs}" '
                  f'nodeset="{ns}" complete_nodeset="{ns}" gp_index="{g.gpi()}">')
        g.line(3, f'<object type="NUMANode" os_index="{s}" cpuset="{cs}" complete_cpuset="{cs}" '
                  f'nodeset="{ns}" complete_nodeset="{ns}" gp_index="{g.gpi()}" local_memory="1099511627776"/>')
        for c in range(cores):
            core_pus = [s * cores + c] + ([sockets * cores + s * cores + c] if threads == 2 else [])
            cm = mask(core_pus)
            g.line(3, f'<object type="Core" os_index="{s * cores + c}" cpuset="{cm}" '
                      f'complete_cpuset="{cm}" nodeset="{ns}" complete_nodeset="{ns}" gp_index="{g.gpi()}">')
            for p in core_pus:
                pm = mask([p])
                g.line(4, f'<object type="PU" os_index="{p}" cpuset="{pm}" complete_cpuset="{pm}" '
                          f'nodeset="{ns}" complete_nodeset="{ns}" gp_index="{g.gpi()}"/>')
            g.line(3, '</object>')
        if ena and s == 0:
            hb = bus
            bus += 1
            g.line(3, f'<object type="Bridge" gp_index="{g.gpi()}" bridge_type="0-1" depth="0" '
                      f'bridge_pci="0000:[{hb:02x}-{hb:02x}]">')
            g.line(4, f'<object type="PCIDev" gp_index="{g.gpi()}" pci_busid="0000:{hb:02x}:00.0" '
                      f'pci_type="{pci_type(0x0200, 0x1d0f, 0xec20)}" pci_link_speed="0.000000">')
            g.line(5, f'<object type="OSDev" gp_index="{g.gpi()}" name="ens32" osdev_type="2"/>')
            g.line(4, '</object>')
            g.line(3, '</object>')
        for sw in switches[s]:
            # host bridge -> switch upstream port -> one downstream port per device
            first = bus
            last = bus + len(sw) + 1
            g.line(3, f'<object type="Bridge" gp_index="{g.gpi()}" bridge_type="0-1" depth="0" '
                      f'bridge_pci="0000:[{first:02x}-{last:02x}]">')
            g.line(4, f'<object type="Bridge" gp_index="{g.gpi()}" bridge_type="1-1" depth="1" '
                      f'bridge_pci="0000:[{first + 1:02x}-{last:02x}]" pci_busid="0000:{first:02x}:00.0" '
                      f'pci_type="{pci_type(0x0604, 0x1000, 0xc030)}" pci_link_speed="0.000000">')
            for i, (kind, devid) in enumerate(sw):
                b = first + 1 + i
                g.line(5, f'<object type="Bridge" gp_index="{g.gpi()}" bridge_type="1-1" depth="2" '
                          f'bridge_pci="0000:[{b + 0x40:02x}-{b + 0x40:02x}]" pci_busid="0000:{b:02x}:{i:02x}.0" '
                          f'pci_type="{pci_type(0x0604, 0x1000, 0xc030)}" pci_link_speed="0.000000">')
                if kind == "gpu":
                    g.line(6, f'<object type="PCIDev" gp_index="{g.gpi()}" pci_busid="0000:{b + 0x40:02x}:00.0" '
                              f'pci_type="{pci_type(0x0302, 0x10de, devid)}" pci_link_speed="32.000000"/>')
                else:
                    g.line(6, f'<object type="PCIDev" gp_index="{g.gpi()}" pci_busid="0000:{b + 0x40:02x}:00.0" '
                              f'pci_type="{pci_type(0x0200, 0x1d0f, devid)}" pci_link_speed="32.000000">')
                    g.line(7, f'<object type="OSDev" gp_index="{g.gpi()}" name="rdmap{b + 0x40}s0" osdev_type="3"/>')
                    rdma += 1
                    g.line(6, '</object>')
                g.line(5, '</object>')
            g.line(4, '</object>')
            g.line(3, '</object>')
            bus = last + 1
        g.line(2, '</object>')
    g.line(1, '</object>')
    g.line(0, '</topology>')
    return "\n".join(g.out) + "\n"


def per_socket(n_switch, layout):
    return [[list(layout) for _ in range(n_switch)] for _ in range(2)]


def main():
    files = {
        "p5.48xlarge.xml": machine(
            "p5.48xlarge-like", 2, 48, per_socket(4, [("gpu", 0x2330)] + [("efa", 0xefa1)] * 4)),
        "p5en.48xlarge.xml": machine(
            "p5en.48xlarge-like", 2, 48, per_socket(4, [("gpu", 0x2335)] + [("efa", 0xefa2)] * 2)),
        "p4d.24xlarge.xml": machine(
            "p4d.24xlarge-like", 2, 24,
            per_socket(2, [("gpu", 0x20b0), ("gpu", 0x20b0), ("efa", 0xefa0)])),
        "single-numa.xml": machine(
            "single NUMA node, no NIC", 1, 8, [[[("gpu", 0x2330)], [("gpu", 0x2330)]]], ena=False),
    }
    for name, text in files.items():
        with open(name, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
