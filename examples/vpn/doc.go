// Package vpn is an example: a small, complete point-to-point encrypted
// tunnel built only on gsoplane's public API (dataplane/tunnel and its
// Seal and Open hooks), for a VPN author to read first. The command is
// cmd/vpn; the bench's tunnel scenario runs it through Open.
//
// It is NOT a product VPN. There is no handshake and no key rotation:
// both ends read one pre-shared key from a file, derive a key per
// direction from it and the two addresses, and use it until they stop;
// restarting an end restarts its nonce counter, so the other end's replay
// window refuses its datagrams until that end is restarted too. There is
// no roaming (the peer's address is a flag), no cookie against denial of
// service, and no padding hiding packet lengths. Use WireGuard for that.
//
// What it shows is the data path: each inner packet travels in one UDP
// datagram as a 16-byte header (type 4, a receiver index of 0 and a
// 64-bit counter, little-endian, as WireGuard's transport data message),
// the packet encrypted with ChaCha20-Poly1305 (golang.org/x/crypto) under
// a nonce made of the counter, with the header as associated data, and
// the 16-byte tag. The counter counts up from 0 per direction; the
// receiver refuses a counter it has seen or one older than its replay
// window of 2048 (RFC 6479), and a datagram whose tag does not verify,
// and counts each refusal by reason (Stats.Receive: Auth, Replay,
// Malformed). Sealing and opening run on whole batches, in place in the
// tunnel's buffers, without allocating.
//
// Usage, on each end (as root):
//
//	head -c 32 /dev/urandom > vpn.key   # once, copied to both ends
//	go build ./examples/vpn/cmd/vpn
//	vpn -key vpn.key -local 198.18.100.1:51820 -peer 198.18.100.2:51820 -tun vpn0
//	ip addr add 10.0.0.1/24 dev vpn0 && ip link set vpn0 up
package vpn
