// Package wgkernel creates and configures the Linux kernel's WireGuard
// devices (wireguard.ko), for the tests that run gsoplane's WireGuard
// against them, from Go: the guests of the kernel matrix have no ip or wg
// binary. A device is made with RTM_NEWLINK of kind "wireguard" (Create)
// and configured and read over the WireGuard generic netlink family
// ("wireguard", version 1: WG_CMD_SET_DEVICE and WG_CMD_GET_DEVICE, the
// attributes of the kernel's include/uapi/linux/wireguard.h), through a
// socket opened in a network namespace (Open).
//
// It sets what an interop test needs (private key, listen port, peers
// with public key, endpoint and allowed IPs, replacing the peers) and reads
// what it checks (each peer's last handshake, bytes received and sent).
// The encoding and the parser are plain Go (attr.go) and tested without a
// kernel; the parser takes the kernel's replies only, and is fuzzed all
// the same. Only gsoplane's tests import it.
package wgkernel
