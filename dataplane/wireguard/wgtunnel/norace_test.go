//go:build !race

package wgtunnel

// raceEnabled: see race_test.go.
const raceEnabled = false
