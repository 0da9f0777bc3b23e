// Package xsk is gsoplane's AF_XDP port. Open binds one AF_XDP socket to
// every RX queue of a NIC, each with its own UMEM and rings, and attaches
// an XDP program that redirects to them only IP packets for configured
// prefixes; ARP, ND and everything else, traffic for the host included,
// go on to the kernel. An XDP program someone else attached is an error,
// never replaced. A Socket's TX side is a pipeline.Sink through NewSink
// (which fills in Ethernet headers from the kernel's routes and
// neighbours) and its RX side a pipeline.Receiver.
//
// The sockets and rings are our own; from asavie/xdp only the XSKMAP
// registration is used (see prog_linux.go for why). Ring indices go
// through sync/atomic, and everything that needs package unsafe lives in
// xsk_unsafe_linux.go.
//
// It needs Linux, CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW, and works in
// the network namespace of the calling thread. On other systems Open
// returns an error. It imports pipeline, segment and internal packages;
// the gateway (package dataplane) and embedders import it.
package xsk
