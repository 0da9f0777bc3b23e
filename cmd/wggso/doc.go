// Command wggso is a userspace WireGuard interface on gsoplane's tunnel
// data path (dataplane/wireguard/wgtunnel): it creates the TUN device
// INTERFACE and serves WireGuard's configuration socket for it,
// /var/run/wireguard/INTERFACE.sock, which wg(8) and wg-quick(8) use:
//
//	WG_QUICK_USERSPACE_IMPLEMENTATION=wggso wg-quick up wg0
//
// Without -f it starts itself again in the background, waits until the
// interface and its socket are ready (or prints why they are not) and
// exits, as wg-quick expects. It stops cleanly on SIGINT or SIGTERM,
// when its socket file is removed, and when the interface is deleted
// (wg-quick down). It serves Prometheus metrics (each peer's traffic,
// handshakes and drops by reason, the tunnel's counters) and /healthz
// on -metrics, 127.0.0.1:9465 by default, with cmd/udpfwd's server
// (internal/httpserve).
//
// Exit status: 0 after a clean stop (or -h, -version; without -f, once
// the background process is ready); 1 when setting up or running
// failed; 2 for bad flags or arguments, found before touching the
// system. It needs Linux, CAP_NET_ADMIN (the TUN device) and write
// access to /var/run/wireguard (root). Once set up, before it says it
// is ready, it drops every capability but CAP_NET_ADMIN and
// CAP_NET_BIND_SERVICE on every thread (internal/privs), from the
// bounding set too, and sets no_new_privs; it stays uid 0, the
// socket's owner. That needs a binary built with CGO_ENABLED=0: a cgo
// build refuses to start. See docs/wireguard.md.
package main
