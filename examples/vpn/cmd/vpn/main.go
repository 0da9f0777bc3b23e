// Command vpn runs the example tunnel of package examples/vpn (read its
// documentation first: it is not a product VPN).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gsoplane/gsoplane/examples/vpn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run opens the tunnel, moves packets until ctx ends and prints its
// counters.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	t, err := vpn.Open(args, stderr)
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
