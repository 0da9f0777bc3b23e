package main

import "fmt"

// The guest's two virtio-net NICs are joined by a wire: a bridge of two
// tap devices with virtio-net headers, in a network namespace of QEMU's
// own, so that the NICs offload as a cloud NIC does (TSO, checksums, the
// host's GRO to the guest: QEMU offers them only with a tap backend), and
// the host's network is not touched. Where the taps cannot be made (not
// root, no /dev/net/tun), a QEMU hub joins them, without offloads.

// wireTaps are the tap devices, in the NICs' order.
var wireTaps = [2]string{"gsotap0", "gsotap1"}

// netdevArgs are QEMU's -netdev and -device arguments of the two NICs on
// the taps (tap) or on a hub, each with the extra virtio-net-pci
// properties props ("ctrl_guest_offloads=off"), if any.
func netdevArgs(tap bool, props string) []string {
	var args []string
	for i := range 2 {
		netdev := fmt.Sprintf("hubport,id=nic%d,hubid=0", i)
		if tap {
			netdev = fmt.Sprintf("tap,id=nic%d,ifname=%s,script=no,downscript=no,vnet_hdr=on", i, wireTaps[i])
		}
		dev := fmt.Sprintf("virtio-net-pci,netdev=nic%d,mac=52:54:00:12:34:%02x,romfile=", i, i+1)
		if props != "" {
			dev += "," + props
		}
		args = append(args, "-netdev", netdev, "-device", dev)
	}
	return args
}
