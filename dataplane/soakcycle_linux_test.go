package dataplane

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// soakChurnPrefix is where soakChurn sends: routed from A into the TUN,
// with no host behind it on the NIC's link.
const soakChurnPrefix = "198.19.128.0/17"

// restart stops the soak's gateway as a clean stop does (Run returns,
// Close), checks that it left nothing behind on gw-a or in this process
// (fds: ownObjects before the first gateway), and opens and runs a new
// one with cfg on the same devices: the TUN device, which the first
// gateway created and Close removed, comes back with its addresses and
// routes, soakChurnPrefix included.
func (lab *gwLab) restart(t *testing.T, cfg GatewayConfig, fds map[string]int) {
	t.Helper()
	start := time.Now()
	if err := lab.stop(); err != nil {
		t.Fatalf("restart: the gateway's stop: %v", err)
	}
	stopped := time.Since(start)
	checkClosed(t, lab, fds, "after a restart's Close")
	defer func() { t.Logf("restart: stopped in %v, running again %v later", stopped, time.Since(start)-stopped) }()
	cfg.TUN.Name, cfg.NIC, cfg.Routes = labTUN, netlab.NICA, netlab.AppRoutes
	lab.A.Do(t, func() {
		g, err := OpenGateway(cfg)
		if err != nil {
			t.Fatalf("restart: OpenGateway: %v", err)
		}
		lab.g = g
	})
	lab.run()
	netlab.Must(t, lab.TUNUp(labTUN))
	netlab.Must(t, lab.A.AddRoute(soakChurnPrefix, labTUN, ""))
}

// soakStalled stops the application reading for 5 s every 20 s, until
// stop: a TCP connection from B whose receiver in A does not read while
// B writes as fast as it can (the window closes), and a UDP socket in A
// nothing reads while B floods it (A's kernel drops at the socket).
// Then A reads the connection to its end and everything is closed.
// Errors are ignored: a link flap or a restart may break a connection;
// the soak is about the gateway's footprint.
func soakStalled(lab *gwLab, n *soakStalls, stop <-chan struct{}) {
	every(20*time.Second, stop, func() { stalledStretch(lab, n, 5*time.Second, stop) })
}

// every runs fn every d until stop closes.
func every(d time.Duration, stop <-chan struct{}, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		fn()
	}
}

// soakStalls counts what soakStalled did, for the soak's log.
type soakStalls struct {
	stretches  atomic.Int64 // stretches with both stalls in place
	missed     atomic.Int64 // stretches whose sockets could not be set up (the link down, the gateway restarting)
	tcpBytes   atomic.Int64 // bytes B wrote into the stalled connections and A read afterwards
	datagrams  atomic.Int64 // datagrams B sent to the unread sockets
	incomplete atomic.Int64 // stalled connections A could not read to the end
}

func (n *soakStalls) String() string {
	return fmt.Sprintf("%d stretches of the application not reading (%d missed): %d bytes held back on TCP and read afterwards (%d connections not read to the end), %d datagrams to unread sockets",
		n.stretches.Load(), n.missed.Load(), n.tcpBytes.Load(), n.incomplete.Load(), n.datagrams.Load())
}

// stalledStretch is one stretch of soakStalled, lasting d.
func stalledStretch(lab *gwLab, n *soakStalls, d time.Duration, stop <-chan struct{}) {
	var socks closers
	defer socks.closeAll()
	set := false
	defer func() {
		if !set {
			n.missed.Add(1)
		}
	}()
	tcpAddr := netip.AddrPortFrom(netlab.App4, 5303).String()
	udpAddr := netip.AddrPortFrom(netlab.App4, 9303).String()
	var ln net.Listener
	var unread net.PacketConn
	if lab.A.Run(func() (err error) {
		if ln, err = net.Listen("tcp", tcpAddr); err != nil {
			return err
		}
		socks.add(ln)
		unread, err = net.ListenPacket("udp", udpAddr)
		return err
	}) != nil {
		return
	}
	socks.add(unread)
	var send, flood net.Conn
	if lab.B.Run(func() (err error) {
		if send, err = net.DialTimeout("tcp", tcpAddr, 5*time.Second); err != nil {
			return err
		}
		socks.add(send)
		flood, err = net.Dial("udp", udpAddr)
		return err
	}) != nil {
		return
	}
	socks.add(flood)
	// A connection B sees set up may never reach A's accept queue when
	// A's last handshake packets were lost (a link flap, a restart):
	// nothing here waits without a deadline.
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	recv, err := ln.Accept()
	if err != nil {
		return
	}
	socks.add(recv)

	set = true
	n.stretches.Add(1)
	end := time.Now().Add(d)
	wrote := make(chan int64, 1)
	go func() { // B writes until its deadline; A does not read meanwhile
		var total int64
		defer func() { wrote <- total }()
		send.SetWriteDeadline(end)
		buf := make([]byte, 256<<10)
		for {
			k, err := send.Write(buf)
			total += int64(k)
			if err != nil {
				return
			}
		}
	}()
	flood.SetWriteDeadline(end)
	buf := make([]byte, 1400)
	for time.Now().Before(end) {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := flood.Write(buf); err == nil {
			n.datagrams.Add(1)
		}
	}
	total := <-wrote
	send.(*net.TCPConn).CloseWrite()
	recv.SetReadDeadline(time.Now().Add(30 * time.Second))
	if got, err := io.Copy(io.Discard, recv); err != nil || got != total { // A reads again, to the end
		n.incomplete.Add(1)
	}
	n.tcpBytes.Add(total)
}

// soakMACChange changes gw-a's MAC address under load every 25 s, to a
// new locally administered address, and teaches B the new address as a
// real network would learn it (setNICMAC): the gateway follows it while
// TCP and UDP flow. Errors are ignored: a link flap may be under way.
func soakMACChange(lab *gwLab, stop <-chan struct{}) {
	n := byte(0)
	every(25*time.Second, stop, func() {
		n++
		setNICMAC(lab, net.HardwareAddr{0x02, 0x5a, 0x00, 0x00, 0x00, n})
	})
}
