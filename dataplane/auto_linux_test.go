package dataplane

import (
	"bytes"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestPortChoice opens the gateway's NIC port on the reference veth
// (native XDP, no AF_XDP zero-copy, TSO) and on the veth with fewer
// features, and checks the port and mode each choice takes and the one
// log line that says which and why.
func TestPortChoice(t *testing.T) {
	netlab.RequireRoot(t)
	const noZC = "driver veth has no AF_XDP zero-copy"
	for _, c := range []struct {
		name     string
		features map[string]bool // of gw-a before the gateway opens
		port     PortKind
		zc       XDPZeroCopy
		want     PortKind
		line     string // the NIC port line's message
		why      string // in its why
	}{
		{"auto", nil, PortAuto, XDPZeroCopyAuto, PortPacket, "NIC port: AF_PACKET offload (the NIC segments TCPv4, TCPv6, UDP)", noZC},
		{"auto/no-tso", map[string]bool{"tso": false, "tx-udp-segmentation": false}, PortAuto, XDPZeroCopyAuto, PortPacket,
			"NIC port: AF_PACKET partial", noZC},
		// Linux 6.1 keeps USO when checksum offload is turned off.
		{"auto/no-offloads", map[string]bool{"tx": false, "tx-udp-segmentation": false}, PortAuto, XDPZeroCopyAuto, PortPacket, "NIC port: AF_PACKET full", noZC},
		{"auto/zero-copy-off", nil, PortAuto, XDPZeroCopyOff, PortPacket, "NIC port: AF_PACKET offload", "zero-copy off"},
		{"xdp", nil, PortXDP, XDPZeroCopyAuto, PortXDP, "NIC port: AF_XDP copy mode", "asked for; " + noZC},
		{"xdp/zero-copy-off", nil, PortXDP, XDPZeroCopyOff, PortXDP, "NIC port: AF_XDP copy mode", "asked for; zero-copy off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			cfg := GatewayConfig{Port: c.port, XDP: XDPOptions{ZeroCopy: c.zc}, Log: slog.New(slog.NewTextHandler(&log, nil))}
			lab := newGwLabWith(t, cfg, func(tp *netlab.Topology) {
				if c.features != nil {
					netlab.Must(t, tp.A.SetFeatures(netlab.NICA, c.features))
				}
			})
			if lab.g.Port() != c.want {
				t.Errorf("port %v, want %v", lab.g.Port(), c.want)
			}
			if x := lab.g.XDP(); x != nil && x.ZeroCopy() {
				t.Error("the AF_XDP port says it is bound in zero-copy mode on a veth")
			}
			checkPortLine(t, log.String(), c.line, c.why)
			tcpTransfer(t, lab, labSrv4, 4<<20, false)
			tcpTransfer(t, lab, labSrv4, 4<<20, true)
		})
	}
}

// checkPortLine checks that the log has one NIC port line, with msg
// and why in it.
func checkPortLine(t *testing.T, log, msg, why string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "NIC port") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `msg="`+msg) || !strings.Contains(lines[0], why) {
		t.Errorf("the log's NIC port lines:\n%s\nwant one, %q, why %q", strings.Join(lines, "\n"), msg, why)
	}
}

// TestZeroCopyRefused asks for zero-copy on the veth, which has none:
// OpenGateway fails with ErrZeroCopy naming the driver, whether the port
// is AF_XDP or chosen, and leaves no XDP program behind.
func TestZeroCopyRefused(t *testing.T) {
	for _, port := range []PortKind{PortXDP, PortAuto} {
		t.Run(port.String(), func(t *testing.T) {
			tp := netlab.NewTopologyT(t, "gw")
			err := openRefused(t, tp.A, GatewayConfig{
				TUN: TUNOptions{Name: labTUN}, NIC: netlab.NICA, Routes: netlab.AppRoutes,
				Port: port, XDP: XDPOptions{ZeroCopy: XDPZeroCopyOn},
			})
			if !errors.Is(err, ErrZeroCopy) || !strings.Contains(err.Error(), "driver veth") {
				t.Fatalf("OpenGateway = %v, want ErrZeroCopy naming the driver (veth)", err)
			}
			t.Log(err)
			if l := tp.A.LinkT(t, netlab.NICA); l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached {
				t.Errorf("an XDP program (ID %d) stayed attached", l.Attrs().Xdp.ProgId)
			}
		})
	}
}

// TestZeroCopyInvalid: zero-copy asked for where it cannot be is refused
// before anything opens.
func TestZeroCopyInvalid(t *testing.T) {
	for _, x := range []struct {
		port PortKind
		opts XDPOptions
	}{
		{PortPacket, XDPOptions{ZeroCopy: XDPZeroCopyOn}},
		{PortXDP, XDPOptions{Mode: xsk.ModeGeneric, ZeroCopy: XDPZeroCopyOn}},
		{PortXDP, XDPOptions{ZeroCopy: XDPZeroCopyOff + 1}},
	} {
		_, err := openNIC(GatewayConfig{NIC: "nonexist0", Port: x.port, XDP: x.opts}, slog.New(slog.DiscardHandler))
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%v %+v: %v, want ErrInvalidConfig", x.port, x.opts, err)
		}
	}
}

// TestWarnNoMultiBuffer: an AF_XDP port without multi-buffer warns when
// the device's MTU makes frames longer than one UMEM frame (the XDP
// program hands them to the host's stack), and only then.
func TestWarnNoMultiBuffer(t *testing.T) {
	tp := netlab.NewTopologyT(t, "gw")
	for _, c := range []struct {
		mtu  int
		warn bool
	}{{1500, false}, {9000, true}} {
		t.Run(strconv.Itoa(c.mtu), func(t *testing.T) {
			var log bytes.Buffer
			tp.A.Do(t, func() {
				netlab.Must(t, tp.A.Netlink().LinkSetMTU(tp.A.LinkT(t, netlab.NICA), c.mtu))
				x, err := xsk.Open(xsk.Config{Ifname: netlab.NICA, MultiBuffer: xsk.MultiBufferOff})
				netlab.Must(t, err)
				defer x.Close()
				warnNoMultiBuffer(netlab.NICA, x, slog.New(slog.NewTextHandler(&log, nil)))
			})
			if got := strings.Contains(log.String(), "AF_XDP without multi-buffer"); got != c.warn {
				t.Errorf("MTU %d: warned %v, want %v:\n%s", c.mtu, got, c.warn, log.String())
			}
		})
	}
}
