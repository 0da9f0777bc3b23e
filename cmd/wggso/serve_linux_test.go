package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/internal/chachapoly"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// TestStopsWhenSocketRemoved: wggso logs that it is up, with the AEAD
// its CPU runs; removing the socket file stops it cleanly (no error:
// exit 0), and the interface goes with it.
func TestStopsWhenSocketRemoved(t *testing.T) {
	ns := netlab.NewT(t, "wggso")
	cfg := &config{Interface: fmt.Sprintf("wgr%d", os.Getpid()%1000000), Queues: 1}
	path, err := uapi.SocketPath(cfg.Interface)
	netlab.Must(t, err)
	var logged syncbuf.Buffer
	ready, done := serveIn(context.Background(), ns, cfg, slog.New(slog.NewTextHandler(&logged, nil)))
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	if up := logged.String(); !strings.Contains(up, "msg=\"wggso: up\"") || !strings.Contains(up, "aead="+chachapoly.Implementation()) {
		t.Errorf("log once up: %q, want wggso: up with aead=%s", up, chachapoly.Implementation())
	}
	if _, err := ns.Link(cfg.Interface); err != nil {
		t.Fatalf("no interface once ready: %v", err)
	}
	netlab.Must(t, os.Remove(path))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still serving 10 s after its socket was removed")
	}
	if _, err := ns.Link(cfg.Interface); err == nil {
		t.Error("the interface outlived wggso")
	}
}

// serveIn runs serve in ns on a goroutine of its own: ready gets what
// serve reports when ready, done what it returned, once ns.Run is over
// (its handle of the namespace closed, which the fd check at the end of
// the tests would otherwise catch open).
func serveIn(ctx context.Context, ns *netlab.NS, cfg *config, log *slog.Logger) (ready, done <-chan error) {
	r, d := make(chan error, 1), make(chan error, 1)
	go func() {
		var err error
		ns.Run(func() error {
			err = serve(ctx, cfg, log, nil, func(err error) { r <- err })
			return nil
		})
		d <- err
	}()
	return r, d
}
