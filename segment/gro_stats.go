package segment

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
