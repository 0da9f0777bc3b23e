package segment

// The layout of the IP, TCP and UDP headers the package reads and
// rewrites: protocol numbers, lengths, field offsets and flag bits.

// IP protocol numbers and IPv6 extension headers.
const (
	protoHopByHop = 0
	protoTCP      = 6
	protoUDP      = 17
	protoRouting  = 43
	protoFragment = 44
	protoDestOpts = 60
)

// Header lengths.
const (
	ipv4MinLen = 20 // without options
	ipv6Len    = 40 // without extension headers
	fragHdrLen = 8  // IPv6 Fragment header
	tcpMinLen  = 20 // without options
	udpLen     = 8
)

// Field offsets from the start of their header.
const (
	ipv4TotalOff  = 2
	ipv4IDOff     = 4
	ipv4FragOff   = 6
	ipv4CsumOff   = 10
	ipv6PLenOff   = 4
	ipv6NextOff   = 6
	tcpSeqOff     = 4
	tcpFlagsOff   = 13
	tcpCsumOffset = 16
	udpLenOff     = 4
	udpCsumOffset = 6
)

// IPv4 flags (in the fragment word), the IPv6 Fragment header's M flag.
const (
	ipv4Evil = 0x8000 // the reserved flag
	ipv4DF   = 0x4000
	ipv4MF   = 0x2000
	ipv6MF   = 0x0001
)

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpURG = 0x20
	tcpCWR = 0x80
)

// udpCsumZero is a computed UDP checksum of 0 as it is sent: all ones
// (RFC 768).
const udpCsumZero = 0xffff
