// Package vpn is an example: a small, complete point-to-point encrypted
// tunnel built only on gsoplane's public API (dataplane/tunnel and its
// Seal and Open hooks), for a VPN author to read first. The command is
// cmd/vpn; the bench's tunnel scenario runs it through Open.
//
// It is NOT a product VPN. There is no handshake and no key rotation:
// both ends read one pre-shared key from a file, derive a key per
// direction from it and the two addresses, and use it until they stop.
// There is no roaming (the peer's address is a flag), no cookie against
// denial of service, and no padding hiding packet lengths. Use WireGuard
// for that.
//
// What it shows is the data path: each inner packet travels in one UDP
// datagram as a 16-byte header (type 4, a 32-bit epoch where WireGuard's
// transport data message has its receiver index, and a 64-bit counter,
// little-endian), the packet encrypted with ChaCha20-Poly1305
// (golang.org/x/crypto) under a nonce made of the epoch and the counter,
// with the header as associated data, and the 16-byte tag. Sealing and
// opening run on whole batches, in place in the tunnel's buffers,
// without allocating.
//
// Without a handshake, what keeps a (key, nonce) from ever repeating and
// a replay from being accepted across restarts is the epochs, which each
// end keeps in its state file (-state; one per end, written by a rename
// of a synced new file, and synced before a value takes effect):
//
//   - A sender seals under an epoch that no run of it had: the file's
//     next epoch, taken (written) at start and every 2 seconds, the
//     counter counting from 0 in each. A crash can skip an epoch, never
//     reuse one. If the file cannot be written the sender keeps its
//     epoch (and logs it); it never seals past the last counter.
//   - A receiver keeps a replay window of 2048 counters (RFC 6479) for
//     the sender's current epoch and one for the previous (datagrams
//     reordered around a change), and takes a new epoch only above the
//     highest it ever accepted, which its file holds before the first
//     datagram of the epoch is accepted: a datagram accepted before a
//     restart is refused after it. If the file cannot be written the
//     new epoch is refused (as a replay).
//
// So after the sender restarts its datagrams are accepted at once; after
// the receiver restarts it refuses the sender's current epoch (its
// datagrams could be replays) and takes the next: traffic resumes
// within 2 seconds. A datagram that is not a data message, whose tag
// does not verify or that the windows or the epochs refuse is dropped
// and counted by reason (Stats.Receive: Malformed, Auth, Replay). A
// state file that is lost or restored from a backup can reuse nonces:
// then change the key.
//
// Usage, on each end (as root):
//
//	head -c 32 /dev/urandom > vpn.key   # once, copied to both ends
//	go build ./examples/vpn/cmd/vpn
//	vpn -key vpn.key -state vpn.state -local 198.18.100.1:51820 -peer 198.18.100.2:51820 -tun vpn0
//	ip addr add 10.0.0.1/24 dev vpn0 && ip link set vpn0 up
package vpn
