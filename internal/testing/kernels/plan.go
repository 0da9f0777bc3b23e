package kernels

import (
	"encoding/json"
	"os"
	"time"
)

// PlanPath is where the init finds its Plan in the guest.
const PlanPath = "/etc/kernels/plan.json"

// Plan is what the init does in the guest, written by the host into the
// initramfs.
type Plan struct {
	Kernel string // the kernel's name in the report
	// Release is the kernel's release (uname -r): the modules are under
	// /lib/modules/Release.
	Release string
	// Modules are loaded before anything runs, with their dependencies.
	Modules []string
	// Smoke asks for the network smoke check before the steps: the
	// guest's NICs with their drivers, whether a native XDP program
	// attaches to each virtio-net NIC, and whether a frame sent on one
	// arrives on the other.
	Smoke bool
	Steps []Step
	// Prebuilt stands in for the Go toolchain the guest lacks: for the key
	// "build DIR" or "test DIR", the binary the host built for the package
	// in the guest directory DIR, which `go build -o OUT .` or
	// `go test -c -o OUT .` run in DIR copies to OUT.
	Prebuilt map[string]string `json:",omitempty"`
}

// Step is one binary the init runs.
type Step struct {
	Name   string   // the package, "dataplane/xsk", or "bench"
	Binary string   // its path in the guest
	Dir    string   // its working directory (the package's directory, for testdata)
	Args   []string // its arguments
	// GoTest says the binary is a test binary run with -test.v, whose
	// output is parsed into tests.
	GoTest bool
	// Timeout is when the init kills it.
	Timeout time.Duration
}

// Marshal returns p as the JSON ReadPlan reads.
func (p *Plan) Marshal() ([]byte, error) {
	return json.MarshalIndent(p, "", "\t")
}

// ReadPlan reads the Plan in name.
func ReadPlan(name string) (*Plan, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
