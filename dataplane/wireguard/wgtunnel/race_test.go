//go:build race

package wgtunnel

// raceEnabled: the test binary has the race detector, whose sync.Pool
// drops what is put back, so that allocation counts mean nothing.
const raceEnabled = true
