package dataplane_test

import (
	"context"
	"log"
	"net/netip"
	"os"
	"os/signal"

	"github.com/gsoplane/gsoplane/dataplane"
)

// A gateway between a TUN device and a NIC: what the TUN's routes send
// goes out of eth0, cut in software and charged to its senders; what comes
// back for those prefixes is merged (GRO) and written into the TUN. It
// needs root and the devices, so it only compiles here.
func ExampleOpenGateway() {
	gw, err := dataplane.OpenGateway(dataplane.GatewayConfig{
		TUN:    dataplane.TUNOptions{Name: "gso0", Queues: 2},
		NIC:    "eth0",
		Routes: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := gw.Run(ctx); err != nil {
		log.Fatal(err)
	}
	st := gw.Stats()
	log.Printf("%d segments out, %d packets back in %d writes", st.Forward.Segments, st.Return.Packets, st.Return.Writes)
}
