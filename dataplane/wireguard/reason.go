package wireguard

// A Reason is why a message was refused (or, for OK and Keepalive, that
// it was not). It is an error, so that the handshake functions return it
// as one; the batch functions set it per Packet.
type Reason uint8

// The reasons.
const (
	OK            Reason = iota
	Short                // shorter than its type's size: truncated
	Oversize             // longer than its type's size
	UnknownType          // not one of the four message types (or reserved bytes set)
	BadMAC1              // MAC1 wrong: not for this device's public key
	NeedCookie           // under load and MAC2 not valid: a cookie reply is the answer
	Auth                 // an AEAD tag did not verify
	BadKey               // a public key of small order
	UnknownPeer          // an initiation from a static key that is no peer's
	UnknownIndex         // a receiver index that is not this device's, or not for this message type
	Replay               // a counter seen before or below the replay window
	OldTimestamp         // an initiation whose timestamp is not newer than the peer's last
	RateLimited          // an initiation sooner after the peer's last than the rate allows
	Expired              // the keypair is too old or out of counters
	NoKey                // Seal: the peer has no current keypair (a handshake is due)
	NoRoom               // Seal: the buffer has no room for the header and tag
	Keepalive            // Open: an authenticated keepalive, no inner packet
	Malformed            // Open: the plaintext is no IPv4 or IPv6 packet that fits
	NoPrivateKey         // Handle: the device has no private key
	Queued               // Seal: the peer has packets staged (Peer.Stage), which go first
	SourceLimited        // Handle: under load, a source's handshake messages past SourceRate

	NumReasons // the number of reasons: every Reason is below it
)

var reasonText = [NumReasons]string{
	OK:            "ok",
	Short:         "message truncated",
	Oversize:      "message oversize",
	UnknownType:   "unknown message type",
	BadMAC1:       "wrong mac1",
	NeedCookie:    "mac2 needed under load",
	Auth:          "authentication failed",
	BadKey:        "public key of small order",
	UnknownPeer:   "unknown peer",
	UnknownIndex:  "unknown receiver index",
	Replay:        "replayed counter",
	OldTimestamp:  "replayed or old initiation",
	RateLimited:   "initiation rate exceeded",
	Expired:       "keypair expired",
	NoKey:         "no keypair",
	NoRoom:        "no room for header and tag",
	Keepalive:     "keepalive",
	Malformed:     "plaintext not an IP packet",
	NoPrivateKey:  "no private key",
	Queued:        "queued behind staged packets",
	SourceLimited: "handshake rate of the source exceeded",
}

func (r Reason) Error() string {
	if r < NumReasons {
		return "wireguard: " + reasonText[r]
	}
	return "wireguard: unknown reason"
}

// String is Error without the package's prefix.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonText[r]
	}
	return "unknown reason"
}
