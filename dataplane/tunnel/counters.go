package tunnel

import "github.com/gsoplane/gsoplane/dataplane/frame"

// Add returns the field-by-field sum of s and o, as for the tunnels a
// program opened one after the other; the flags (Send.GSO,
// Receive.GRO) are o's, the later tunnel's.
func (s Stats) Add(o Stats) Stats {
	s.Forward = s.Forward.Add(o.Forward)
	s.Send = s.Send.Add(o.Send)
	s.Receive = s.Receive.Add(o.Receive)
	s.Return = s.Return.Add(o.Return)
	s.Fallbacks += o.Fallbacks
	s.ControlSent += o.ControlSent
	s.ControlErrors += o.ControlErrors
	s.Send.GSO, s.Receive.GRO = o.Send.GSO, o.Receive.GRO
	return s
}

// AppendCounters appends the counters to dst by name (snake_case, stable),
// so that a metrics exporter passes them through without knowing them:
// the traffic each way, the socket's messages, calls and errors, the
// datagrams Open refused by verdict, the control path's and the GRO's
// counters. The drops of each direction, by frame.DropReason, are left
// to Forward.Drops and Return.Drops (frame.ForwardDropReasons,
// frame.ReturnDropReasons).
func (s Stats) AppendCounters(dst []frame.Counter) []frame.Counter {
	f, snd, rcv, r := s.Forward, s.Send, s.Receive, s.Return
	return append(dst,
		frame.Counter{Name: "tun_super_packets", Value: f.SuperPackets},
		frame.Counter{Name: "tun_segments", Value: f.Segments},
		frame.Counter{Name: "tun_bytes", Value: f.Bytes},
		frame.Counter{Name: "tun_cut", Value: f.Cut},
		frame.Counter{Name: "send_datagrams", Value: snd.Datagrams},
		frame.Counter{Name: "send_messages", Value: snd.Messages},
		frame.Counter{Name: "send_gso_messages", Value: snd.GSOMessages},
		frame.Counter{Name: "send_bytes", Value: snd.Bytes},
		frame.Counter{Name: "send_calls", Value: snd.Syscalls},
		frame.Counter{Name: "send_dropped", Value: snd.Dropped},
		frame.Counter{Name: "send_no_peer", Value: snd.NoPeer},
		frame.Counter{Name: "send_unsealed", Value: snd.Unsealed},
		frame.Counter{Name: "send_refused", Value: snd.Refused},
		frame.Counter{Name: "send_unreachable", Value: snd.Unreachable},
		frame.Counter{Name: "send_msgsize", Value: snd.MsgSize},
		frame.Counter{Name: "send_nobufs", Value: snd.NoBufs},
		frame.Counter{Name: "send_gso_refused", Value: snd.GSORefused},
		frame.Counter{Name: "send_other_error", Value: snd.Other},
		frame.Counter{Name: "send_reprobes", Value: snd.Reprobes},
		frame.Counter{Name: "receive_datagrams", Value: rcv.Datagrams},
		frame.Counter{Name: "receive_messages", Value: rcv.Messages},
		frame.Counter{Name: "receive_gro_messages", Value: rcv.GROMessages},
		frame.Counter{Name: "receive_calls", Value: rcv.Syscalls},
		frame.Counter{Name: "receive_short", Value: rcv.Short},
		frame.Counter{Name: "receive_auth", Value: rcv.Auth},
		frame.Counter{Name: "receive_replay", Value: rcv.Replay},
		frame.Counter{Name: "receive_malformed", Value: rcv.Malformed},
		frame.Counter{Name: "receive_truncated", Value: rcv.Truncated},
		frame.Counter{Name: "receive_unknown_peer", Value: rcv.UnknownPeer},
		frame.Counter{Name: "receive_not_allowed", Value: rcv.NotAllowed},
		frame.Counter{Name: "receive_peer_errors", Value: rcv.PeerErrors},
		frame.Counter{Name: "receive_roamed", Value: rcv.Roamed},
		frame.Counter{Name: "control_received", Value: rcv.Control},
		frame.Counter{Name: "control_sent", Value: s.ControlSent},
		frame.Counter{Name: "control_errors", Value: s.ControlErrors},
		frame.Counter{Name: "return_packets", Value: r.Packets},
		frame.Counter{Name: "return_bytes", Value: r.Bytes},
		frame.Counter{Name: "tun_writes", Value: r.Writes},
		frame.Counter{Name: "tun_gro_super_packets", Value: r.SuperPackets},
		frame.Counter{Name: "tun_gro_refused", Value: r.Refused},
		frame.Counter{Name: "fallbacks", Value: s.Fallbacks},
	)
}
