// Package uapi is WireGuard's cross-platform userspace configuration
// interface, through which wg(8) and wg-quick(8) configure and show a
// userspace device: get=1 and set=1 operations of key=value lines on a
// unix stream socket, /var/run/wireguard/<interface>.sock (SocketPath).
//
// # Protocol
//
// A set operation (ParseSet, then Handler.Apply) takes the device's
// private_key (hex; zeros remove it), listen_port, fwmark (0: none) and
// replace_peers=true (remove every peer first), then, per public_key, a
// peer's remove=true, update_only=true (change it only if it exists),
// preshared_key (zeros: none), endpoint (IP:port or [IP]:port),
// persistent_keepalive_interval (seconds; 0: none),
// replace_allowed_ips=true (drop its allowed IPs first), allowed_ip
// (IP/cidr, masked; an allowed IP moves from the peer that had it) and
// protocol_version (1). The whole operation is read and checked before
// anything changes; the changes are then made, the device's (in the
// order above) and then the peers' in order, up to the first the device
// refuses. A peer with the device's own public key is skipped,
// as WireGuard does. A get operation (AppendGet) shows the device and
// each peer, with last_handshake_time_sec and _nsec, rx_bytes and
// tx_bytes. Each answer ends with errno=0, or errno=-N on failure (as
// wg(8) reads it): EINVAL for a bad key or value, EPROTO for a malformed
// line, E2BIG past the Limits, EADDRINUSE for a listen port the device
// refuses.
//
// # Device
//
// A Handler configures a Device: the methods *wireguard.Device has (a
// data path embeds it to apply the listen port and fwmark to its
// sockets). The Handler keeps the peers' allowed IPs (sorted), and hands
// them all to a Device that is also a Router after each set operation:
// cryptokey routing is the data path's.
//
// # Server
//
// Listen makes the socket as wg(8) expects it (directory 0755, socket
// 0600), replacing a stale socket file left by a process that is gone
// and refusing one in use; Close removes it, and Serve ends
// (ErrSocketRemoved) when another removes it, upon which the protocol
// asks a userspace device to exit. Limits bound what a local
// client may send: line length, peers and allowed IPs per set, the
// connections served at once, the time to send operations and to read
// each answer. The Server is Linux's (Listen fails elsewhere); the
// protocol (Handler, ParseSet, AppendGet) is pure Go.
package uapi
