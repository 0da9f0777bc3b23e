// Package icmp answers the packets a router drops as a router does: its
// Replier, a frame.Replier, writes ICMP and ICMPv6 errors (host
// unreachable, fragmentation needed or packet too big, time exceeded)
// back through a frame.Writer such as the TUN device, within Linux's
// rate limits. The gateway (package dataplane) gives one to its
// forwarders, sinks and wire sources.
//
// It is pure Go and builds on every OS. It imports frame,
// internal/icmperr and internal/iphdr; the ICMP messages are built with
// gVisor's tcpip/header, which only this package and the gateway pull in.
package icmp
