package wgkernel

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// Create adds the WireGuard device name (MTU mtu) with h, in h's
// namespace; its UDP socket will live there. A kernel without WireGuard
// (no wireguard.ko, or a module the kernel cannot load) refuses the kind:
// the error then wraps netlab.ErrMissingFeature, the reason a test skips
// with.
func Create(h *netlink.Handle, name string, mtu int) error {
	err := h.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: WireGuard (wireguard.ko, Linux 5.6): add a link of kind wireguard: %v", netlab.ErrMissingFeature, err)
	}
	if err != nil {
		return fmt.Errorf("add WireGuard link %s: %w", name, err)
	}
	return nil
}

// Conn is a generic netlink socket that speaks to the WireGuard family
// in one network namespace.
type Conn struct {
	sock   *nl.SocketHandle
	family uint16
}

// Open opens a Conn in ns (netns.None(): the calling thread's) and looks
// the family up.
func Open(ns netns.NsHandle) (*Conn, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("generic netlink socket: %w", err)
	}
	c := &Conn{sock: &nl.SocketHandle{Socket: s}}
	msgs, err := c.do(nl.GENL_ID_CTRL, 0, getFamily())
	if err == nil && len(msgs) != 1 {
		err = fmt.Errorf("%d replies", len(msgs))
	}
	if err == nil {
		c.family, err = parseFamilyID(msgs[0])
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("generic netlink family %q: %w", familyName, err)
	}
	return c, nil
}

// Close closes the socket.
func (c *Conn) Close() error {
	c.sock.Close()
	return nil
}

// Set applies cfg to its device (WG_CMD_SET_DEVICE).
func (c *Conn) Set(cfg Config) error {
	msg, err := setDevice(cfg)
	if err != nil {
		return err
	}
	if _, err := c.do(c.family, unix.NLM_F_ACK, msg); err != nil {
		return fmt.Errorf("set WireGuard device %s: %w", cfg.Name, err)
	}
	return nil
}

// Get reads the device name (WG_CMD_GET_DEVICE).
func (c *Conn) Get(name string) (*Device, error) {
	msgs, err := c.do(c.family, unix.NLM_F_DUMP, getDevice(name))
	if err != nil {
		return nil, fmt.Errorf("get WireGuard device %s: %w", name, err)
	}
	return parseDevice(msgs)
}

// do sends the generic netlink message msg to family and returns the
// replies (each a generic netlink header and attributes).
func (c *Conn) do(family uint16, flags int, msg []byte) ([][]byte, error) {
	req := nl.NewNetlinkRequest(int(family), flags)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_GENERIC: c.sock}
	req.AddRawData(msg)
	return req.Execute(unix.NETLINK_GENERIC, 0)
}
