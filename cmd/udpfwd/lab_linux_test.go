package main

// The test topology is the reference topology (netlab.Topology): udpfwd
// and the application in namespace A, the server in namespace B. udpfwd
// creates utun0 with the application's addresses (from UDPFWD_ADDR) and
// routes the server's prefixes into it.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/promtext"
)

const labTUN = "utun0"

var (
	labNIC = netlab.NICA
	srv4   = netlab.Srv4.String()
	srv6   = netlab.Srv6.String()
)

// labEnv and labArgs configure udpfwd for the lab (-addr comes from the
// environment, to exercise UDPFWD_*).
var (
	labEnv  = []string{"UDPFWD_ADDR=198.18.0.1/24,2001:2:0:1::1/64"}
	labArgs = []string{"-nic", labNIC, "-tun", labTUN, "-route", "198.19.0.0/24", "-route", "2001:2:0:19::/64", "-next-hop", netlab.NICB4.String()}
)

// newLab builds the topology and returns the namespaces A and B.
func newLab(t *testing.T) (a, b *netlab.NS) {
	t.Helper()
	tp := netlab.NewTopologyT(t, "udpfwd")
	return tp.A, tp.B
}

// dial connects from namespace ns.
func dial(ns *netlab.NS, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Run(func() (err error) {
		c, err = net.DialTimeout(network, addr, 5*time.Second)
		return err
	})
	return c, err
}

// get fetches http://addr/path from namespace ns.
func get(ns *netlab.NS, addr, path string) (*http.Response, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, a string) (net.Conn, error) { return dial(ns, network, a) },
	}}
	return client.Get("http://" + addr + path)
}

// scrape fetches udpfwd's /metrics from namespace ns and returns the
// samples by name{labels}.
func scrape(ns *netlab.NS, addr string) (map[string]float64, error) {
	resp, err := get(ns, addr, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return promtext.Parse(resp.Body)
}

// pprofStatus returns the HTTP status of /debug/pprof/ in namespace ns.
func pprofStatus(t *testing.T, ns *netlab.NS) int {
	t.Helper()
	resp, err := get(ns, "127.0.0.1:9464", "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
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
func waitReady(t *testing.T, p *proc, ns *netlab.NS) {
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

// leftovers describes what udpfwd left in namespace ns (an XDP or tcx
// program, a clsact or ingress qdisc or a tc ingress filter on the NIC, a
// TUN device), or returns "".
func leftovers(t *testing.T, ns *netlab.NS) string {
	t.Helper()
	var left []string
	nic := ns.LinkT(t, labNIC)
	if x := nic.Attrs().Xdp; x != nil && x.Attached {
		left = append(left, fmt.Sprintf("XDP program %d on %s", x.ProgId, labNIC))
	}
	ns.Do(t, func() {
		if netlab.Lacks(t, netlab.TCX) != nil { // no tcx, no tcx programs
			return
		}
		r, err := link.QueryPrograms(link.QueryOptions{Target: nic.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		netlab.Must(t, err)
		for _, p := range r.Programs {
			left = append(left, fmt.Sprintf("tcx program %d on %s", p.ID, labNIC))
		}
	})
	qdiscs, err := ns.Netlink().QdiscList(nic)
	netlab.Must(t, err)
	for _, q := range qdiscs {
		if q.Attrs().Parent == netlink.HANDLE_INGRESS {
			left = append(left, fmt.Sprintf("%s qdisc on %s", q.Type(), labNIC))
		}
	}
	filters, err := ns.Netlink().FilterList(nic, netlink.HANDLE_MIN_INGRESS)
	netlab.Must(t, err)
	for _, f := range filters {
		left = append(left, fmt.Sprintf("%s filter %+v on %s", f.Type(), *f.Attrs(), labNIC))
	}
	if _, err := ns.Link(labTUN); err == nil {
		left = append(left, "TUN device "+labTUN)
	}
	return strings.Join(left, "; ")
}
