// Package frame is the contract between the forwarding engine
// (dataplane/pipeline) and the ports: the interfaces a port implements
// (Source, Sink, OffloadSink, BackloggedSink, Receiver, HeaderReceiver,
// Writer, VectorWriter, ReadDeadliner, Replier), the Frame a sink lends,
// the one vocabulary of drops (DropReason, Drops), the errors ports and
// engine wrap (ErrInvalidConfig, ErrNotSupported, ErrNoDevice,
// ErrPacketTruncated), BurstSegments, which bounds what a sink is asked
// at once, and Counter, by which a port names its sockets' counters.
//
// The ports (dataplane/tun, xsk, afpacket, udp) and their shared
// machinery import this package and not the engine; the engine and the
// gateway (package dataplane) import both. It is pure Go, builds on every
// OS and imports nothing of the project but segment.
package frame
