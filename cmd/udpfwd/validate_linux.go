package main

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
)

// Flag limits.
const (
	minMTU          = 576
	maxMTU          = 65535
	minIPv6MTU      = 1280
	minDrainTimeout = 100 * time.Millisecond
	maxDrainTimeout = 10 * time.Minute
)

// The fixed budget's range: from one burst of frame.BurstSegments
// segments (the dataplane's Burst) to what the most TX frames hold
// besides one.
var minBudget, maxBudget = dataplane.BudgetRange()

// parseConfig parses args, then fills every flag not given on the command
// line from its UDPFWD_* variable, then validates. It returns
// flag.ErrHelp for -h, the flag package's error for a malformed command
// line, or one error listing every problem.
func parseConfig(args []string, lookupEnv func(string) (string, bool)) (*config, error) {
	cfg := new(config)
	fs := newFlagSet(cfg)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if cfg.Version {
		return cfg, nil
	}
	var p problems
	if fs.NArg() > 0 {
		p.add("unexpected argument %q (every option is a flag)", fs.Arg(0))
	}
	p.merge(applyEnv(fs, lookupEnv))
	if len(p) == 0 {
		p.merge(cfg.validate())
	}
	return cfg, p.err("invalid configuration")
}

// validate checks the flags against each other and their ranges, without
// touching the system.
func (c *config) validate() problems {
	var p problems
	if c.Ingress != "" {
		p.merge(c.validateIngress())
	} else {
		p.merge(c.validateTUN())
	}
	p.merge(c.validateNIC())
	p.merge(c.validateTransmit())
	p.merge(c.validateObservability())
	return p
}

func (c *config) validateTUN() problems {
	var p problems
	if msg := ifNameProblem(c.TUN); msg != "" {
		p.add("-tun %q: %s", c.TUN, msg)
	}
	if c.MTU != 0 && (c.MTU < minMTU || c.MTU > maxMTU) {
		p.add("-mtu %d: want %d to %d, or 0 to leave the device's MTU", c.MTU, minMTU, maxMTU)
	} else if c.MTU != 0 && c.MTU < minIPv6MTU && c.hasIPv6() {
		p.add("-mtu %d: IPv6 needs at least %d (an IPv6 -addr, -route or -redirect is set)", c.MTU, minIPv6MTU)
	}
	p.merge(networkProblems("-route", c.Routes))
	p.merge(networkProblems("-redirect", c.Redirect))
	if c.Queues < 1 || c.Queues > tun.MaxQueues {
		p.add("-queues %d: want 1 to %d", c.Queues, tun.MaxQueues)
	}
	return p
}

// validateIngress checks -ingress and the flags that go with it; the TUN
// flags other than -redirect do not.
func (c *config) validateIngress() problems {
	var p problems
	if msg := ifNameProblem(c.Ingress); msg != "" {
		p.add("-ingress %q: %s", c.Ingress, msg)
	}
	if c.Ingress == c.NIC {
		p.add("-ingress %q: the same device as -nic", c.Ingress)
	}
	if len(c.Redirect) == 0 || len(c.IngressRedirect) == 0 {
		p.add("-ingress needs -redirect (the prefixes behind it) and -ingress-redirect (those behind -nic)")
	}
	if len(c.Addrs) > 0 || len(c.Routes) > 0 || c.MTU != 0 {
		p.add("-addr, -route and -mtu configure the TUN device: not with -ingress")
	}
	p.merge(networkProblems("-redirect", c.Redirect))
	p.merge(networkProblems("-ingress-redirect", c.IngressRedirect))
	return p
}

func (c *config) validateNIC() problems {
	var p problems
	switch msg := ifNameProblem(c.NIC); {
	case c.NIC == "":
		p.add("-nic is required: the interface to transmit on, e.g. -nic eth0")
	case msg != "":
		p.add("-nic %q: %s", c.NIC, msg)
	case c.NIC == c.TUN:
		p.add("-nic %q: the same device as -tun", c.NIC)
	}
	if msg := nextHopProblem(c.NextHop.addr); msg != "" {
		p.add("-next-hop %v: %s", c.NextHop.addr, msg)
	}
	switch b := c.BusyPoll; {
	case b != 0 && (b < time.Microsecond || b > xsk.MaxBusyPoll):
		// SO_BUSY_POLL counts whole microseconds; a wait that polls
		// longer than the sink's own 1ms wait burns a core for nothing.
		p.add("-busy-poll %v: want 0 (off) or %v to %v", b, time.Microsecond, xsk.MaxBusyPoll)
	case b != 0 && c.Port.value == "packet":
		p.add("-busy-poll %v: busy polling is for AF_XDP sockets, not -port packet", b)
	}
	switch z := c.ZeroCopy.value; {
	case z == "on" && c.Port.value == "packet":
		p.add("-xdp-zerocopy on: zero-copy is for AF_XDP sockets, not -port packet")
	case z == "on" && c.XDPMode.value == "generic":
		p.add("-xdp-zerocopy on: zero-copy needs the XDP program in the driver, not -xdp-mode generic")
	}
	return p
}

// nextHopProblem says why a is no host to send frames to, or "".
func nextHopProblem(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return ""
	case a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a multicast or broadcast address: want the unicast address of a router on the NIC's link"
	case a.IsUnspecified(), a.IsLoopback():
		return "want the unicast address of a router on the NIC's link"
	}
	return ""
}

func (c *config) validateTransmit() problems {
	var p problems
	b := c.Budget.bytes
	badBudget := b != 0 && (b < minBudget || b > maxBudget)
	if badBudget {
		p.add("-budget %d: want auto or %d (%dKiB) to %d (%dMiB) bytes", b, minBudget, minBudget>>10, maxBudget, maxBudget>>20)
	}
	switch txFrames := int64(dataplane.UMEMFrames(int(b))) / 2; {
	case c.TxQueueLen < 0 || !badBudget && c.Port.value != "packet" && int64(c.TxQueueLen) > txFrames:
		p.add("-tx-queue-len %d: want 1 to %d (the TX frames with -budget %v), or 0 for every TX frame", c.TxQueueLen, txFrames, &c.Budget)
	case c.TxQueueLen > 0 && c.Queues > 1:
		p.add("-tx-queue-len %d: only with -queues 1 (the dataplane sizes per-queue queues itself)", c.TxQueueLen)
	}
	if c.DrainTimeout < minDrainTimeout || c.DrainTimeout > maxDrainTimeout {
		p.add("-drain-timeout %v: want %v to %v", c.DrainTimeout, minDrainTimeout, maxDrainTimeout)
	}
	return p
}

func (c *config) validateObservability() problems {
	var p problems
	if c.Metrics != "" && !strings.Contains(c.Metrics, ":") {
		p.add("-metrics %q: want host:port, e.g. 127.0.0.1:9464, or empty to disable", c.Metrics)
	}
	if c.Pprof && c.Metrics == "" {
		p.add("-pprof: needs a -metrics address to serve /debug/pprof/ on")
	}
	return p
}

// ifNameProblem applies the kernel's rules for interface names and says
// what is wrong with name, or returns "".
func ifNameProblem(name string) string {
	switch {
	case name == "":
		return "empty: want a device name (the kernel would choose one)"
	case len(name) > unix.IFNAMSIZ-1:
		return fmt.Sprintf("name too long: %d bytes, at most %d", len(name), unix.IFNAMSIZ-1)
	case name == "." || name == "..":
		return "name cannot be . or .."
	case strings.ContainsAny(name, "/: \t\n\v\f\r\x00"):
		return "name contains '/', ':', a NUL or white space"
	}
	return ""
}

// networkProblems reports prefixes with host bits set: a route names a
// network.
func networkProblems(flagName string, l prefixList) problems {
	var p problems
	for _, pfx := range l {
		if pfx != pfx.Masked() {
			p.add("%s %v: host bits set; did you mean %v?", flagName, pfx, pfx.Masked())
		}
	}
	return p
}

// hasIPv6 reports whether any prefix flag is IPv6.
func (c *config) hasIPv6() bool {
	for _, l := range []prefixList{c.Addrs, c.Routes, c.Redirect} {
		for _, pfx := range l {
			if pfx.Addr().Is6() && !pfx.Addr().Is4In6() {
				return true
			}
		}
	}
	return false
}

// warnings says what in a valid configuration is likely a mistake: a
// TUN device with no -redirect prefix (nor -addr to take them from), to
// which nothing from the NIC is written.
func (c *config) warnings() []string {
	if c.Ingress == "" && len(c.redirects()) == 0 {
		return []string{"no -redirect prefix (nor -addr to take the networks of): nothing arriving on the NIC is written into the TUN device"}
	}
	return nil
}

// redirects returns -redirect, or else the networks of -addr.
func (c *config) redirects() []netip.Prefix {
	if len(c.Redirect) > 0 {
		return c.Redirect
	}
	out := make([]netip.Prefix, 0, len(c.Addrs))
	for _, a := range c.Addrs {
		out = append(out, a.Masked())
	}
	return out
}
