package dataplane

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/vishvananda/netlink"
)

// mtuFollower holds the forwarders and the TUN device to the MTU the
// gateway sends: the NIC's, or the port's limit if that is lower (the
// longest packet it sends in one frame: with AF_XDP a UMEM frame, 4096
// bytes less the Ethernet header, whatever the NIC's MTU). The
// forwarders drop what exceeds it and answer the sender as a router
// would (pipeline.ForwarderConfig.MTU); the TUN device's MTU is lowered
// to it, so that the host sizes its packets and super-packets' segments
// to fit, and raised back, never above what it was at open, when the
// NIC's grows again.
type mtuFollower struct {
	g      *Gateway
	log    *slog.Logger
	nl     *netlink.Handle // in the gateway's network namespace
	want   int             // the TUN device's MTU at open
	tun    atomic.Int64    // the TUN device's MTU now
	send   atomic.Int64    // the MTU the forwarders hold segments to
	capped bool            // the port's limit is below the NIC's MTU
}

// start reads the TUN device's MTU and applies the NIC's. Call it in the
// gateway's network namespace.
func (m *mtuFollower) start(nicMTU int) error {
	if m.g.tun != nil {
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("dataplane: netlink: %w", err)
		}
		m.nl = h
		l, err := h.LinkByIndex(m.g.tun.Index())
		if err != nil {
			return fmt.Errorf("dataplane: TUN device %s: %w", m.g.tun.Name(), err)
		}
		m.want = l.Attrs().MTU
		m.tun.Store(int64(m.want))
	}
	return m.apply(nicMTU)
}

// follow is the monitor's callback when the NIC's MTU changes.
func (m *mtuFollower) follow(nicMTU int) {
	if err := m.apply(nicMTU); err != nil {
		m.log.Error("cannot follow the NIC's MTU", "err", err)
	}
}

// apply holds the forwarders to the MTU the port sends at nicMTU and
// sets the TUN device's MTU to the lower of that and its MTU at open. It
// logs when the port's limit starts holding the MTU below the NIC's.
func (m *mtuFollower) apply(nicMTU int) error {
	send := nicMTU
	if limit := m.g.nic.maxPacket; limit > 0 && limit < nicMTU {
		send = limit
		if !m.capped {
			m.log.Warn("the gateway's MTU is below the NIC's: the port sends each packet in one frame (AF_XDP: one UMEM frame); larger packets are answered with fragmentation needed or packet too big",
				"nic_mtu", nicMTU, "mtu", send, "port", m.g.nic.kind.String())
		}
	}
	m.capped = send < nicMTU
	m.send.Store(int64(send))
	for _, f := range m.g.out.fwds {
		f.SetMTU(send)
	}
	for _, w := range m.g.out.wires {
		w.SetMTU(send)
	}
	if m.nl == nil {
		return nil
	}
	mtu := min(m.want, send)
	if int(m.tun.Load()) == mtu {
		return nil
	}
	l := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Index: m.g.tun.Index(), Name: m.g.tun.Name()}}
	if err := m.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("dataplane: set the MTU of %s to %d: %w", m.g.tun.Name(), mtu, err)
	}
	m.log.Info("the TUN device's MTU follows the NIC's", "tun", m.g.tun.Name(), "mtu", mtu, "nic_mtu", nicMTU, "send_mtu", send)
	m.tun.Store(int64(mtu))
	return nil
}

// close releases the netlink handle.
func (m *mtuFollower) close() {
	if m.nl != nil {
		m.nl.Close()
	}
}
