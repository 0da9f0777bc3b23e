// Command udpfwd is the gsoplane gateway: it forwards between a TUN device,
// where local applications, containers or VMs send TCP and UDP
// super-packets, and a NIC, segmenting in software and transmitting
// through AF_XDP with backpressure toward the senders.
//
// It needs Linux, CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF, and runs in the
// network namespace it is started in. After set-up it keeps only
// CAP_NET_ADMIN (next-hop resolution, and removing its addresses and routes
// at exit) and can switch to an unprivileged user. See docs/udpfwd.md or
// run udpfwd -h.
package main
