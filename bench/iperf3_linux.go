package main

// iperf3 as an extra, optional row: the server in B, the client in A, its
// own JSON report as the result (first seconds omitted with -O, like our
// warm-up). Never required: the row exists only when iperf3 is installed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

const iperf3Port = 5202

type iperf3Run struct {
	server, client *exec.Cmd
	out            bytes.Buffer
	done           chan error
}

// startIperf3 starts the server in B and, once it listens, the client in
// A for warmup+duration (whole seconds: iperf3 takes no fractions).
func startIperf3(ctx context.Context, l *lab, srv netip.Addr, warmup, duration time.Duration) (*iperf3Run, error) {
	secs := func(d time.Duration) string { return strconv.Itoa(int(math.Ceil(d.Seconds()))) }
	r := &iperf3Run{done: make(chan error, 1)}
	r.server = exec.CommandContext(ctx, "iperf3", "-s", "-1", "-B", srv.String(), "-p", strconv.Itoa(iperf3Port))
	if err := l.B.Start(r.server); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	args := []string{"-c", srv.String(), "-p", strconv.Itoa(iperf3Port), "-J", "-t", secs(warmup + duration)}
	if warmup > 0 {
		args = append(args, "-O", secs(warmup))
	}
	// Wait for the server to listen: a connection attempt would use up
	// its one test (-1), so look at B's listening sockets instead.
	deadline := time.Now().Add(3 * time.Second)
	for !l.listeningB(iperf3Port) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.kill()
			return nil, fmt.Errorf("iperf3 server in B did not listen on port %d", iperf3Port)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.client = exec.CommandContext(ctx, "iperf3", args...) // killed on an interrupt
	r.client.Stdout = &r.out
	if err := l.A.Start(r.client); err != nil {
		r.kill()
		return nil, fmt.Errorf("iperf3 client: %w", err)
	}
	go func() { r.done <- r.client.Wait() }()
	return r, nil
}

func (r *iperf3Run) counters(c *counters) {}

// stop waits for the client to finish and reads its report.
func (r *iperf3Run) stop() (final, error) {
	var err error
	select {
	case err = <-r.done:
	case <-time.After(10 * time.Second):
		r.client.Process.Kill()
		<-r.done
		err = fmt.Errorf("iperf3 client did not finish")
	}
	r.kill()
	var rep struct {
		Error string
		End   struct {
			SumSent struct {
				Retransmits uint64
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		}
	}
	if jerr := json.Unmarshal(r.out.Bytes(), &rep); jerr != nil {
		return final{}, fmt.Errorf("iperf3: %v, report %q: %w", err, truncate(r.out.String(), 200), jerr)
	}
	if rep.Error != "" {
		return final{}, fmt.Errorf("iperf3: %s", rep.Error)
	}
	bps, retrans := rep.End.SumReceived.BitsPerSecond, rep.End.SumSent.Retransmits
	return final{Bps: &bps, Retrans: &retrans}, nil
}

// kill ends the server (by its process handle) if it is still running;
// with -1 it has usually exited after its one test.
func (r *iperf3Run) kill() {
	r.server.Process.Kill() // an error only says it is gone already
	r.server.Wait()
}

// listeningB reports whether a TCP socket listens on port in B.
func (l *lab) listeningB(port int) bool {
	found := false
	l.B.Run(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/tcp")
		if err != nil {
			return err
		}
		out := string(b)
		want := fmt.Sprintf(":%04X ", port)
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			// local_address rem_address st: st 0A is LISTEN.
			if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "0A" {
				found = true
			}
		}
		return nil
	})
	return found
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
