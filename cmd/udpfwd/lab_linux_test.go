package main

// The test topology (DESIGN.md, reference topology), built with iproute2:
// udpfwd and the application in namespace A, the server in namespace B.
//
//	A: utun0 198.18.0.1/24 2001:2:0:1::1/64 (udpfwd's), gw-a 198.18.100.1/24
//	B: gw-b 198.18.100.2/24, server 198.19.0.2/24 and 2001:2:0:19::2/64,
//	   routes back to 198.18.0.0/24 and 2001:2:0:1::/64 via gw-a

import (
	"bufio"
	"context"
	"fmt"
	"github.com/gsoplane/gsoplane/internal/netnsutil"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	labNIC  = "gw-a"
	labPeer = "gw-b"
	labTUN  = "utun0"
	srv4    = "198.19.0.2"
	srv6    = "2001:2:0:19::2"
)

// udpfwdArgs configures udpfwd for the lab (-addr comes from the
// environment, to exercise UDPFWD_*).
var (
	labEnv  = []string{"UDPFWD_ADDR=198.18.0.1/24,2001:2:0:1::1/64"}
	labArgs = []string{"-nic", labNIC, "-tun", labTUN, "-route", "198.19.0.0/24", "-route", "2001:2:0:19::/64", "-next-hop", "198.18.100.2"}
)

var nsSeq atomic.Int64

// ip runs an iproute2 (or other) command and fails the test if it fails.
func ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// newNetns creates a uniquely named namespace with lo up and deletes it
// at the end of the test.
func newNetns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("udpfwd-%d-%d", os.Getpid(), nsSeq.Add(1))
	ip(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ip(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// newLab builds the topology and returns the namespaces A and B.
func newLab(t *testing.T) (a, b string) {
	t.Helper()
	a, b = newNetns(t), newNetns(t)
	ip(t, "ip", "link", "add", "name", labNIC, "netns", a, "numtxqueues", "2", "numrxqueues", "2",
		"type", "veth", "peer", "name", labPeer, "netns", b, "numtxqueues", "2", "numrxqueues", "2")
	for _, c := range [][]string{
		{a, "link", "set", labNIC, "up"},
		{a, "addr", "add", "198.18.100.1/24", "dev", labNIC},
		{a, "addr", "add", "2001:2:0:100::1/64", "dev", labNIC, "nodad"},
		{b, "link", "set", labPeer, "up"},
		{b, "addr", "add", "198.18.100.2/24", "dev", labPeer},
		{b, "addr", "add", "2001:2:0:100::2/64", "dev", labPeer, "nodad"},
		{b, "addr", "add", srv4 + "/24", "dev", labPeer},
		{b, "addr", "add", srv6 + "/64", "dev", labPeer, "nodad"},
		{b, "route", "add", "198.18.0.0/24", "via", "198.18.100.1", "src", srv4},
		{b, "route", "add", "2001:2:0:1::/64", "via", "2001:2:0:100::1", "src", srv6},
	} {
		ip(t, append([]string{"ip", "-n"}, c...)...)
	}
	// A veth hands its peer partial checksums in memory, which AF_XDP
	// does not see: make B checksum in software, as hosts behind a wire do.
	ip(t, "ip", "netns", "exec", b, "ethtool", "-K", labPeer, "tx", "off")
	return a, b
}

// dial connects from namespace ns.
func dial(ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netnsutil.RunNamed(ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, 5*time.Second)
		return err
	})
	return c, err
}

// get fetches http://addr/path from namespace ns.
func get(ns, addr, path string) (*http.Response, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, a string) (net.Conn, error) { return dial(ns, network, a) },
	}}
	return client.Get("http://" + addr + path)
}

// scrape fetches udpfwd's /metrics from namespace ns and returns the
// samples by name{labels}.
func scrape(ns, addr string) (map[string]float64, error) {
	resp, err := get(ns, addr, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// pprofStatus returns the HTTP status of /debug/pprof/ in namespace ns.
func pprofStatus(t *testing.T, ns string) int {
	t.Helper()
	resp, err := get(ns, "127.0.0.1:9464", "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// parseMetrics reads the Prometheus text format into name{labels} → value.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// sumMetric adds the samples of metric name (any labels).
func sumMetric(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// waitReady polls /metrics until udpfwd answers, failing if it exits.
func waitReady(t *testing.T, p *proc, ns string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := scrape(ns, "127.0.0.1:9464"); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("udpfwd not ready: %v\n%s", err, p.out.String())
		}
		if code := p.wait(50 * time.Millisecond); code >= 0 {
			t.Fatalf("udpfwd exited with %d:\n%s", code, p.out.String())
		}
	}
}

// leftovers describes an XDP program on the NIC or a TUN device left in
// namespace ns, or returns "".
func leftovers(t *testing.T, ns string) string {
	t.Helper()
	var left []string
	if out := ip(t, "ip", "-n", ns, "-d", "link", "show", labNIC); strings.Contains(out, "prog/xdp") {
		left = append(left, "XDP program on "+labNIC+": "+out)
	}
	if out, err := exec.Command("ip", "-n", ns, "link", "show", labTUN).CombinedOutput(); err == nil {
		left = append(left, "TUN device: "+string(out))
	}
	return strings.Join(left, "; ")
}
