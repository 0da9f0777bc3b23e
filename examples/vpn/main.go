package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run opens the tunnel, moves packets until ctx ends and prints its
// counters.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	t, err := open(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "vpn:", err)
		return 2
	}
	defer t.Close()
	fmt.Fprintf(stdout, "%s up, inner MTU %d\n", t.Device().Name(), t.MTU())
	err = t.Run(ctx)
	st := t.Stats()
	fmt.Fprintf(stdout, "sent %d datagrams (%.1f per sendmmsg), received %d (%.1f per recvmmsg); dropped: %d bad tag, %d replayed, %d malformed\n",
		st.Send.Datagrams, st.DatagramsPerSend(), st.Receive.Datagrams, st.DatagramsPerReceive(), st.Receive.Auth, st.Receive.Replay, st.Receive.Malformed)
	if err != nil {
		fmt.Fprintln(stderr, "vpn:", err)
		return 1
	}
	return 0
}

// open parses the flags, reads the key and opens the tunnel with the
// example's framing, in the calling thread's network namespace.
func open(args []string, stderr io.Writer) (*tunnel.Tunnel, error) {
	fs := flag.NewFlagSet("vpn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyFile := fs.String("key", "", "`FILE` holding the 32-byte pre-shared key")
	local := fs.String("local", "", "local UDP `ADDRESS:PORT` (an address, not 0.0.0.0: the keys are derived from both)")
	peer := fs.String("peer", "", "the peer's UDP `ADDRESS:PORT`")
	name := fs.String("tun", "vpn0", "TUN device `NAME`")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	la, err := netip.ParseAddrPort(*local)
	if err != nil || la.Addr().IsUnspecified() {
		return nil, fmt.Errorf("-local %q: want an address and a port", *local)
	}
	pa, err := netip.ParseAddrPort(*peer)
	if err != nil {
		return nil, fmt.Errorf("-peer %q: %w", *peer, err)
	}
	psk, err := os.ReadFile(*keyFile)
	if err != nil {
		return nil, err
	}
	if len(psk) != keyLen {
		return nil, fmt.Errorf("%s: %w, not %d", *keyFile, errKey, len(psk))
	}
	s, o, err := newCiphers(psk, la, pa)
	if err != nil {
		return nil, err
	}
	return tunnel.Open(tunnel.Config{
		Name: *name, Local: la, Peer: pa,
		Headroom: headerLen, Tailroom: tagLen, Seal: s.seal, Open: o.open,
		Logger: slog.New(slog.NewTextHandler(stderr, nil)),
	})
}

// newCiphers makes the sealer of the direction from local to peer and
// the opener of the other.
func newCiphers(psk []byte, local, peer netip.AddrPort) (*sealer, *opener, error) {
	s, err := newSealer(directionKey(psk, local.String(), peer.String()))
	if err != nil {
		return nil, nil, err
	}
	o, err := newOpener(directionKey(psk, peer.String(), local.String()))
	return s, o, err
}
