package segment

// CoalesceStats are cumulative counters. Every packet given to Coalesce is
// counted once in Packets and once in exactly one of Merged, Unmerged or
// the pass-through reasons.
type CoalesceStats struct {
	Packets      uint64 // packets given to Coalesce
	SuperPackets uint64 // super-packets written: merges of two or more packets
	Merged       uint64 // packets that went into super-packets, their first included
	Unmerged     uint64 // mergeable packets that found nothing to merge with
	Flushes      uint64 // super-packets still open when their batch ended (cut by the batch, not by a rule)

	// Packets passed through unchanged, by reason.
	NotTCPUDP   uint64 // neither TCP nor UDP
	BadChecksum uint64 // IPv4 header (verified unless IPChecked) or transport checksum does not verify
	NoChecksum  uint64 // UDP checksum field zero
	IPOptions   uint64 // IPv4 options, or a Hop-by-Hop Options header that is not first
	Fragment    uint64 // IPv4 fragment (MF, offset or the reserved flag) or IPv6 Fragment header
	Flags       uint64 // TCP SYN, RST, URG or CWR, or PSH/FIN with no merge to end
	NoPayload   uint64 // TCP or UDP without payload (pure ACKs)
	Disabled    uint64 // TCP or UDP while that kind of merge is switched off
	Malformed   uint64 // truncated or inconsistent lengths; passed on for the receiving host to judge
}

// Add returns the field-by-field sum of s and o, as for the coalescers of
// several queues.
func (s CoalesceStats) Add(o CoalesceStats) CoalesceStats {
	s.Packets += o.Packets
	s.SuperPackets += o.SuperPackets
	s.Merged += o.Merged
	s.Unmerged += o.Unmerged
	s.Flushes += o.Flushes
	s.NotTCPUDP += o.NotTCPUDP
	s.BadChecksum += o.BadChecksum
	s.NoChecksum += o.NoChecksum
	s.IPOptions += o.IPOptions
	s.Fragment += o.Fragment
	s.Flags += o.Flags
	s.NoPayload += o.NoPayload
	s.Disabled += o.Disabled
	s.Malformed += o.Malformed
	return s
}
