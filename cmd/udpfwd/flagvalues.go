package main

import (
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// choice is a flag value that must be one of a fixed set of words.
type choice struct {
	value   string
	allowed []string
}

func (c *choice) String() string { return c.value }

// Set accepts one of the allowed words.
func (c *choice) Set(s string) error {
	if !slices.Contains(c.allowed, s) {
		return fmt.Errorf("want %s", orList(c.allowed))
	}
	c.value = s
	return nil
}

// orList formats words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// prefixList is a repeatable flag of IP prefixes; each value may also be
// a comma-separated list (as environment variables give them).
type prefixList []netip.Prefix

func (l prefixList) String() string {
	parts := make([]string, len(l))
	for i, p := range l {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// Set appends the comma-separated prefixes in s.
func (l *prefixList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("want ADDRESS/LENGTH, e.g. 198.18.0.1/24 or 2001:2::1/64: %q", part)
		}
		if p.Addr().Is4In6() {
			return fmt.Errorf("%v is an IPv4-mapped IPv6 prefix: write it as IPv4 (%v)", p, unmapPrefix(p))
		}
		*l = append(*l, p)
	}
	return nil
}

// unmapPrefix is the IPv4 prefix of an IPv4-mapped IPv6 prefix.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
}

// addrValue is an optional IP address flag.
type addrValue struct{ addr netip.Addr }

func (a *addrValue) String() string {
	if !a.addr.IsValid() {
		return ""
	}
	return a.addr.String()
}

// Set accepts an IPv4 or IPv6 address, or "" for none.
func (a *addrValue) Set(s string) error {
	if s == "" {
		a.addr = netip.Addr{}
		return nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("want an IPv4 or IPv6 address")
	}
	a.addr = addr.Unmap()
	return nil
}

// explained wraps a flag of the flag package's own types so that a value
// it cannot parse says what it wants ("parse error" alone does not).
type explained struct {
	flag.Value
	want string
}

func (e explained) Set(s string) error {
	if err := e.Value.Set(s); err != nil {
		return fmt.Errorf("%w: want %s", err, e.want)
	}
	return nil
}

// explainedBool is explained for a boolean flag (-v without a value).
type explainedBool struct{ explained }

func (explainedBool) IsBoolFlag() bool { return true }

// explainFlags wraps every int, bool and duration flag of fs.
func explainFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		switch g.Get().(type) {
		case int:
			f.Value = explained{f.Value, "a whole number"}
		case time.Duration:
			f.Value = explained{f.Value, "a duration such as 500ms, 5s or 2m"}
		case bool:
			f.Value = explainedBool{explained{f.Value, "true or false"}}
		}
	})
}

// budgetValue is a byte count with an optional binary suffix, or "auto"
// (stored as 0).
type budgetValue struct{ bytes int64 }

func (b *budgetValue) String() string {
	if b.bytes == 0 {
		return "auto"
	}
	return strconv.FormatInt(b.bytes, 10)
}

// byteSuffixes are the accepted unit suffixes, longest first.
var byteSuffixes = []struct {
	suffix string
	shift  uint
}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"K", 10}, {"M", 20}, {"G", 30}}

// Set accepts "auto" or a positive byte count such as 8388608, 8M or 8MiB.
func (b *budgetValue) Set(s string) error {
	if s == "auto" {
		b.bytes = 0
		return nil
	}
	num, shift := s, uint(0)
	for _, u := range byteSuffixes {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = rest, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > 1<<(62-shift) {
		return fmt.Errorf("want auto or a byte count such as 8388608, 8M or 8MiB")
	}
	b.bytes = n << shift
	return nil
}
