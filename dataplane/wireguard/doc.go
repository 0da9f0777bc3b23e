// Package wireguard is the WireGuard protocol's core, written from the
// protocol's paper and published description: the handshake, cookies,
// transport data messages, keypairs and timers, with no sockets, no TUN
// and no goroutines. A caller (a tunnel's data path, a UAPI, a binary)
// moves the bytes and the time; this package says what they mean and
// what to send. It is pure Go and builds on every system.
//
// # Handshake
//
// Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s, with WireGuard's identifier,
// messages and MACs: Device.AppendInitiation writes an initiation (type
// 1, 148 bytes) to a peer; Device.Handle takes any handshake message
// (Type tells the types apart): an initiation is authenticated (MAC1
// with the device's public key, the static key of a configured peer, a
// TAI64N timestamp newer than that peer's last, at most one per
// Timers.InitiationInterval) and answered with a response (type 2, 92
// bytes); a response completes the initiator's handshake; a cookie reply
// (type 3, 64 bytes) is kept for the next handshake message to its
// sender. Every handshake message carries MAC1 (keyed with the
// receiver's public key) and MAC2 (the receiver's cookie, when one is
// fresh). Under load, which the caller judges and tells Handle, an
// initiation or response without a valid MAC2 is answered with a cookie
// reply only: the cookie is a MAC of the sender's address and port under
// a secret replaced every two minutes, sealed with XChaCha20-Poly1305;
// cookies are good for two minutes. Under load, too, the messages with a
// valid MAC2 from one source (an IPv4 address or an IPv6 /64) are handled
// at SourceRate a second after a burst of SourceBurst, the rest refused
// with SourceLimited. A peer may have a pre-shared key.
// Receiver indices are random 32-bit numbers, unique per device.
//
// # Data messages
//
// Device.Seal and Device.Open work on batches of Packets in place: a
// data message (type 4) is a 16-byte header (type, the receiver's index,
// a 64-bit counter that is the nonce) and the inner packet padded with
// zeros to a multiple of 16 bytes, sealed with ChaCha20-Poly1305 (a
// 16-byte tag), so a buffer holds HeaderLen bytes of room before the
// inner packet and up to 15+TagLen after it (less room: less padding).
// Keys are looked up once per run of packets to one peer (Seal) or with
// one receiver index (Open); Seal takes the run's counters at once, Open
// checks each against a replay window of ReplayWindow counters (8,128)
// and cuts the plaintext to the inner packet's length from its IPv4 or
// IPv6 header. A keepalive is a message with no plaintext. Each packet
// gets a Reason: OK, Keepalive, or why it is to be dropped. Neither
// allocates, and both are safe for concurrent use by several goroutines.
//
// # Keypairs and timers
//
// Each peer has up to three keypairs: current (Seal uses it; an
// initiator's new keypair becomes current at once), previous (still
// opens messages in flight) and next (a responder's new keypair, current
// once the initiator's first data message or keepalive opens with it).
// Peer.Tick runs the protocol's timers at the device's clock
// (Config.Now, injected by tests; Timers, shortened by tests): keypairs
// older than RejectAfterTime (180 s) are dropped; a handshake is asked
// for when a peer without a keypair has something to send, when the
// initiator's keypair reaches RekeyAfterTime (120 s) or RekeyAfterMessages
// (2^60) on sending, or RejectAfterTime − KeepaliveTimeout −
// RekeyTimeout on receiving, and when data sent has had no answer for
// KeepaliveTimeout + RekeyTimeout (15 s); an initiation is retried after
// RekeyTimeout (5 s) plus up to a third of a second of jitter, and given
// up after RekeyAttemptTime (90 s); a keepalive is asked for when data
// received has had no answer for KeepaliveTimeout (10 s), after an
// initiator's handshake, and at the peer's persistent-keepalive
// interval. No counter at or past RejectAfterMessages (2^64 − 2^13 − 1)
// is sent or accepted. Tick returns the Action (SendInitiation,
// SendKeepalive) and the time of its next call; Config.Notify asks for
// an earlier one. A peer's endpoint roams to the source of its latest
// authenticated message.
//
// # Staged packets
//
// A packet Seal refuses for want of a keypair (NoKey), or because
// packets wait already (Queued: they go first), is the caller's to stage
// (Peer.Stage: a copy, up to StagedPackets = 128 per peer, as Linux and
// wireguard-go keep, the oldest dropped beyond). Once the peer has a
// keypair, Tick asks for SendStaged, which seals them in order and hands
// them to the caller; they are dropped when the handshake is given up or
// the peer removed. StagedStats counts them. Only this path allocates
// (a buffer per packet staged); the steady path reads one atomic
// counter per run of packets.
//
// # Configuration
//
// A device's private key may be set later (Config.PrivateKey zero: no
// handshake is made or answered until SetPrivateKey) and replaced: as
// WireGuard does, the keypairs stop sealing (what is in flight still
// opens), so that the next packet sent starts a handshake with the new
// key; the peer with the new public key, if any, is removed. Peers are
// added and removed at any time (Peers lists them in the order added); a
// peer's pre-shared key, persistent keepalive and endpoint change with
// its setters, and Transfer counts the bytes of the messages sealed or
// written for it and authenticated from it. The listen port and fwmark
// are kept for the caller, who binds and marks its sockets. The package
// uapi serves all of it to wg(8); the package wgtunnel runs it on the
// tunnel's data path (cmd/wggso).
//
// # Not here
//
// Allowed IPs and cryptokey routing are the caller's (dataplane/udp's
// Peers), and so are the sockets.
// The transport keys live inside x/crypto's AEADs, which cannot be
// wiped: an expired keypair is unlinked and never used again, and its
// memory goes back to the garbage collector as it is; the handshake's
// ephemeral keys, chaining keys and intermediate keys are zeroed.
// TAI64N timestamps are not coarsened.
package wireguard
