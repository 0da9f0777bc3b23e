// Package port is the lifecycle the two NIC ports share, dataplane/xsk
// (AF_XDP) and dataplane/afpacket (AF_PACKET): the interface and network
// namespace a port was opened in, its sockets and its BPF program under
// one lock, replacing the redirect prefixes, stopping the receivers,
// closing, and checking and renewing the program's attachment (a BPF
// link, or the AF_PACKET port's cls_bpf filter), from any goroutine.
// Each port keeps what is its own: its sockets and its program.
package port
