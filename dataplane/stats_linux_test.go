package dataplane

import (
	"reflect"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
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

// sumCounters adds up the uint64 counters of a SocketStats.
func sumCounters(s SocketStats) uint64 {
	v := reflect.ValueOf(s)
	var sum uint64
	for i := range v.NumField() {
		sum += v.Field(i).Uint()
	}
	return sum
}

// Every counter of the ports' sockets reaches SocketStats: none is lost
// or counted twice (but AF_PACKET's Completed, which is its TX).
func TestSocketStats(t *testing.T) {
	var next uint64
	var x xsk.Stats
	if want, got := fillCounters(reflect.ValueOf(&x).Elem(), &next), sumCounters(xskSocketStats(x)); got != want {
		t.Errorf("AF_XDP: the socket stats sum to %d, want %d", got, want)
	}
	var p afpacket.Stats
	want := fillCounters(reflect.ValueOf(&p).Elem(), &next) + p.TX
	if got := sumCounters(packetSocketStats(p)); got != want {
		t.Errorf("AF_PACKET: the socket stats sum to %d, want %d", got, want)
	}
}
