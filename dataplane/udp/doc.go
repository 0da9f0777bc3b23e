// Package udp holds the halves of a VPN's tunnel for embedders of the
// pipeline: Sink, a pipeline.Sink that sends every segment as the payload
// of a UDP datagram on a connected socket, with sendmmsg(2) and
// UDP_SEGMENT, the way WireGuard sends its tunnel traffic.
//
// It needs Linux (UDP_SEGMENT since 4.18); on other systems NewSink
// returns an error. It imports pipeline only.
package udp
