package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// attachCheckEvery is how often the monitor asks whether the port's
// program is still attached: detaching a BPF link from outside sends no
// netlink notification.
const attachCheckEvery = time.Second

// monitor follows the NIC: its link state, MTU, MAC address and
// existence from the kernel's link notifications, and whether the port's
// program is attached. Link flaps are ordinary: the sinks hold frames
// while the link is down (the budget holds the senders back) and the
// monitor logs each change; link changes are passed on to onLink, MTU
// changes to onMTU, MAC address changes to onMAC.
type monitor struct {
	nic     *nic
	ifindex int
	onLink  func(up bool)
	onMTU   func(mtu int)
	onMAC   func(mac net.HardwareAddr) error
	policy  DetachPolicy
	log     *slog.Logger
	updates chan netlink.LinkUpdate
	done    chan struct{} // closing it ends the subscription
	stop    sync.Once

	mu sync.Mutex
	st NICStats
}

// newMonitor subscribes to link updates in the calling thread's network
// namespace (OpenGateway's).
func newMonitor(n *nic, cfg GatewayConfig, log *slog.Logger, onLink func(bool), onMTU func(int), onMAC func(net.HardwareAddr) error) (*monitor, error) {
	m := &monitor{nic: n, ifindex: n.port.Ifindex(), onLink: onLink, onMTU: onMTU, onMAC: onMAC, policy: cfg.OnDetach, log: log,
		updates: make(chan netlink.LinkUpdate, 16), done: make(chan struct{})}
	link, err := netlink.LinkByIndex(m.ifindex)
	if err != nil {
		return nil, fmt.Errorf("dataplane: NIC: %w", err)
	}
	m.st = NICStats{Up: linkUp(link), MTU: link.Attrs().MTU, MAC: link.Attrs().HardwareAddr, Attached: true}
	err = netlink.LinkSubscribeWithOptions(m.updates, m.done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case <-m.done: // the subscription ends: its socket is closed
			default:
				log.Warn("NIC monitor: netlink", "err", err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("dataplane: subscribe to link updates: %w", err)
	}
	return m, nil
}

// linkUp reports whether a link is up and has a carrier.
func linkUp(l netlink.Link) bool {
	a := l.Attrs()
	return a.Flags&net.FlagUp != 0 && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown)
}

// run follows the NIC until ctx ends, or returns the reason the gateway
// cannot go on: the NIC is gone, or the port's program was detached and
// the policy is DetachStop.
func (m *monitor) run(ctx context.Context) error {
	defer m.close()
	tick := time.NewTicker(attachCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-m.updates:
			if !ok {
				return nil
			}
			if err := m.update(u); err != nil {
				return err
			}
		case <-tick.C:
			if err := m.checkAttached(); err != nil {
				return err
			}
		}
	}
}

// update takes one link notification about the NIC.
func (m *monitor) update(u netlink.LinkUpdate) error {
	if int(u.Index) != m.ifindex {
		return nil
	}
	if u.Header.Type == unix.RTM_DELLINK {
		m.log.Error("the NIC is gone", "ifindex", m.ifindex)
		return fmt.Errorf("dataplane: the NIC (ifindex %d) was deleted", m.ifindex)
	}
	up, mtu, mac := linkUp(u.Link), u.Link.Attrs().MTU, u.Link.Attrs().HardwareAddr
	newMAC := len(mac) == 6 && !bytes.Equal(mac, m.st.MAC) // only the monitor writes st
	m.mu.Lock()
	was := m.st
	m.st.Up, m.st.MTU = up, mtu
	if was.Up && !up {
		m.st.Downs++
	}
	if mtu != was.MTU {
		m.st.MTUChanges++
	}
	if newMAC {
		m.st.MAC = mac
		m.st.MACChanges++
	}
	m.mu.Unlock()
	if up != was.Up {
		m.onLink(up)
	}
	switch {
	case was.Up && !up:
		m.log.Warn("the NIC is down: holding frames until it is up again", "nic", u.Link.Attrs().Name)
	case !was.Up && up:
		m.log.Info("the NIC is up again", "nic", u.Link.Attrs().Name)
	}
	if mtu != was.MTU {
		m.log.Info("the NIC's MTU changed", "nic", u.Link.Attrs().Name, "from", was.MTU, "to", mtu)
		m.onMTU(mtu)
	}
	if newMAC {
		return m.followMAC(u.Link.Attrs().Name, was.MAC, mac)
	}
	return nil
}

// followMAC passes a change of the NIC's MAC address on (Gateway's
// followMAC): the sinks send from the new address, and an XDP program,
// which takes only frames sent to the address it was loaded with, is
// loaded for the new one and swapped in. If that fails the gateway
// cannot go on: its program no longer takes the NIC's frames.
func (m *monitor) followMAC(name string, from, to net.HardwareAddr) error {
	m.log.Info("the NIC's MAC address changed", "nic", name, "from", from.String(), "to", to.String())
	if err := m.onMAC(to); err != nil {
		m.mu.Lock()
		m.st.Attached = false
		m.mu.Unlock()
		m.log.Error("cannot follow the NIC's MAC address", "err", err)
		return fmt.Errorf("dataplane: follow the NIC's MAC address %v: %w", to, err)
	}
	return nil
}

// checkAttached makes sure the port's program is attached, re-attaching
// it or giving up as the policy says.
func (m *monitor) checkAttached() error {
	ok, err := m.nic.port.Attached()
	if err != nil || ok {
		return nil // closed: the gateway is stopping
	}
	m.mu.Lock()
	m.st.Attached = false
	m.st.Detaches++
	m.mu.Unlock()
	prog := m.nic.program
	if m.policy == DetachStop {
		m.log.Error("the " + prog + " was detached from outside: stopping (-xdp-detached stop)")
		return fmt.Errorf("dataplane: %w", m.nic.detached)
	}
	m.log.Warn("the " + prog + " was detached from outside: attaching it again")
	if err := m.nic.port.Reattach(); err != nil {
		m.log.Error("cannot attach the "+prog+" again", "err", err)
		return errors.Join(fmt.Errorf("dataplane: %w", m.nic.detached), err)
	}
	m.mu.Lock()
	m.st.Attached = true
	m.st.Reattaches++
	m.mu.Unlock()
	return nil
}

// close ends the subscription; it may be called more than once.
func (m *monitor) close() { m.stop.Do(func() { close(m.done) }) }

// stats returns the NIC's state as last seen.
func (m *monitor) stats() NICStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}
