package vpn

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
)

// Open parses the command's flags (args, without the command's name),
// reads the key and the state file (-state, created if missing) and
// opens the tunnel with the example's framing, in the calling thread's
// network namespace; stderr takes the flags' usage and the tunnel's
// warnings. The state file is written while the tunnel runs.
func Open(args []string, stderr io.Writer) (*tunnel.Tunnel, error) {
	fs := flag.NewFlagSet("vpn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyFile := fs.String("key", "", "`FILE` holding the 32-byte pre-shared key")
	local := fs.String("local", "", "local UDP `ADDRESS:PORT` (an address, not 0.0.0.0: the keys are derived from both)")
	peer := fs.String("peer", "", "the peer's UDP `ADDRESS:PORT`")
	stateFile := fs.String("state", "", "`FILE` where this end keeps its epochs across restarts (created if missing; never remove it while the key is in use)")
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
	if *stateFile == "" {
		return nil, errors.New("-state: want a file")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	st, err := loadState(*stateFile, log)
	if err != nil {
		return nil, err
	}
	s, o, err := newCiphers(psk, la, pa, st)
	if err != nil {
		return nil, err
	}
	return tunnel.Open(tunnel.Config{
		Name: *name, Local: la, Peer: pa,
		Headroom: headerLen, Tailroom: tagLen, Seal: s.seal, Open: o.open,
		Logger: log,
	})
}

// newCiphers makes the sealer of the direction from local to peer and
// the opener of the other, on the end's state. The sealer takes its
// first epoch.
func newCiphers(psk []byte, local, peer netip.AddrPort, st *state) (*sealer, *opener, error) {
	s, err := newSealer(directionKey(psk, local.String(), peer.String()), st)
	if err != nil {
		return nil, nil, err
	}
	o, err := newOpener(directionKey(psk, peer.String(), local.String()), st)
	return s, o, err
}
