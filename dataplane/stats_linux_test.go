package dataplane

import (
	"reflect"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
)

// fillCounters sets every uint64 counter of the struct v points to, nested
// ones too, to a bit of its own, and returns their sum.
func fillCounters(v reflect.Value, next *uint64) uint64 {
	var sum uint64
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(1 << *next)
			sum += 1 << *next
			*next++
		case reflect.Struct:
			sum += fillCounters(f, next)
		}
	}
	return sum
}

// sumCounters adds up the counters of a SocketStats, checking that their
// names are set and unique.
func sumCounters(t *testing.T, s SocketStats) uint64 {
	sum := s.RX + s.TX + s.Completed
	seen := map[string]bool{}
	for _, c := range s.Counters {
		if c.Name == "" || seen[c.Name] {
			t.Errorf("counter %q: empty or twice", c.Name)
		}
		seen[c.Name] = true
		sum += c.Value
	}
	return sum
}

// Every counter of the ports' sockets reaches SocketStats: none is lost
// or counted twice (but AF_PACKET's Completed, which is its TX).
func TestSocketStats(t *testing.T) {
	var next uint64
	var x xsk.Stats
	if want, got := fillCounters(reflect.ValueOf(&x).Elem(), &next), sumCounters(t, xskSocketStats(x)); got != want {
		t.Errorf("AF_XDP: the socket stats sum to %d, want %d", got, want)
	}
	var p afpacket.Stats
	want := fillCounters(reflect.ValueOf(&p).Elem(), &next) + p.TX
	if got := sumCounters(t, packetSocketStats(p)); got != want {
		t.Errorf("AF_PACKET: the socket stats sum to %d, want %d", got, want)
	}
}

// Appending a socket's counters to a slice with room does not allocate.
func TestAppendCountersAllocs(t *testing.T) {
	buf := make([]frame.Counter, 0, 64)
	var x xsk.Stats
	var p afpacket.Stats
	if n := testing.AllocsPerRun(100, func() { buf = p.AppendCounters(x.AppendCounters(buf[:0])) }); n != 0 {
		t.Errorf("%v allocations per append", n)
	}
}
