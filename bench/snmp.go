package main

// /proc/net counters.

import (
	"strconv"
	"strings"
)

// snmpField returns a field of /proc/net/snmp: a header line and a value
// line, both starting with proto.
func snmpField(snmp, proto, field string) uint64 {
	var hdr []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto {
			continue
		}
		if hdr == nil {
			hdr = f
			continue
		}
		for i := range min(len(hdr), len(f)) {
			if hdr[i] == field {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}
