package frame

// Counter is one named counter of a port's socket. A port appends its
// sockets' counters by name (AppendCounters), so that the gateway passes
// them through and a metrics exporter exports them without knowing the
// port: a new counter is a field and a line in its port.
type Counter struct {
	Name  string // snake_case, stable: the udpfwd metrics' event label
	Value uint64
}

// Lookup returns the value of the counter called name in cs, 0 if none is.
func Lookup(cs []Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
