package tunnel

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// fill sets every uint64 field of the struct v points to, to next()'s
// values, and returns them.
func fill(v any, next func() uint64) []uint64 {
	var set []uint64
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(next())
			set = append(set, f.Uint())
		}
	}
	return set
}

// TestAppendCounters: the names are snake_case and unique, every
// counter of the socket's halves has one (each field set to a value of
// its own, each value named; Receive.Refused, the sum of Auth, Replay
// and Malformed, aside), and Add sums them, the flags the later
// tunnel's.
func TestAppendCounters(t *testing.T) {
	n := uint64(1000)
	next := func() uint64 { n++; return n }
	var s Stats
	want := fill(&s.Send, next)
	want = append(want, fill(&s.Receive, next)...)
	refused := s.Receive.Refused
	s.Forward.SuperPackets, s.Return.Writes, s.ControlSent, s.Fallbacks = next(), next(), next(), next()
	want = append(want, s.Forward.SuperPackets, s.Return.Writes, s.ControlSent, s.Fallbacks)
	cs := s.AppendCounters(nil)
	names := map[string]bool{}
	values := map[uint64]bool{}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, c := range cs {
		if !snake.MatchString(c.Name) || names[c.Name] {
			t.Errorf("counter name %q: not snake_case, or twice", c.Name)
		}
		names[c.Name] = true
		values[c.Value] = true
	}
	for _, v := range want {
		if v != refused && !values[v] {
			t.Errorf("the counter set to %d has no name", v)
		}
	}
	s.Send.GSO = true
	later := Stats{}
	later.Receive.GRO = true
	sum := s.Add(s).Add(later)
	if got := frame.Lookup(sum.AppendCounters(nil), "send_datagrams"); got != 2*s.Send.Datagrams {
		t.Errorf("send_datagrams of s+s: %d, want %d", got, 2*s.Send.Datagrams)
	}
	if sum.Send.GSO || !sum.Receive.GRO {
		t.Errorf("flags of the sum GSO %v GRO %v, want the later tunnel's (false, true)", sum.Send.GSO, sum.Receive.GRO)
	}
}
