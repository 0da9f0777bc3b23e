package vpn

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
)

// state is an end's memory across restarts, in a small file of its own:
// the next epoch its sealer may take (every epoch below it was taken, or
// skipped by a crash) and the highest epoch its opener accepted. A value
// is written, and the file synced, before it takes effect: a crash can
// skip an epoch, never use one twice, and never lose a floor that
// something was accepted above.
type state struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex // the sealer and the opener write it from their own goroutines
	next    uint32     // the lowest epoch never taken; epoch 0 is never used
	floor   uint32     // the highest epoch the opener accepted; 0: none
	failing bool       // the last write failed
}

const stateFormat = "gsoplane example vpn state: next sending epoch %d, highest epoch received %d\n"

var (
	errState     = errors.New("not a state file of the example vpn")
	errExhausted = errors.New("no epoch left: change the key and remove the state file")
)

// loadState reads the state file at path; a missing one is a first
// start. A file it cannot read is an error: starting over could reuse an
// epoch.
func loadState(path string, log *slog.Logger) (*state, error) {
	st := &state{path: path, log: log, next: 1}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return st, nil
	case err != nil:
		return nil, err
	}
	if _, err := fmt.Sscanf(string(b), stateFormat, &st.next, &st.floor); err != nil || st.next == 0 || fmt.Sprintf(stateFormat, st.next, st.floor) != string(b) {
		return nil, fmt.Errorf("%s: %w", path, errState)
	}
	return st, nil
}

// takeEpoch returns an epoch for the sealer that no run has had or will
// have: once the file says so.
func (st *state) takeEpoch() (uint32, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.next
	if e == math.MaxUint32 {
		return 0, errExhausted
	}
	if err := st.write(e+1, st.floor); err != nil {
		return 0, err
	}
	st.next = e + 1
	return e, nil
}

// raiseFloor records that the opener accepts epoch e, above the floor:
// once the file says so.
func (st *state) raiseFloor(e uint32) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.write(st.next, e); err != nil {
		return err
	}
	st.floor = e
	return nil
}

// write replaces the file with one holding next and floor, synced, by a
// rename of a synced new file (a crash leaves the old file or the new),
// and logs the first of a run of failures (the opener tries again at
// each datagram of a new epoch).
func (st *state) write(next, floor uint32) error {
	tmp := st.path + ".new"
	err := func() error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, stateFormat, next, floor)
		if err == nil {
			err = f.Sync()
		}
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
		if err := os.Rename(tmp, st.path); err != nil {
			return err
		}
		return syncDir(filepath.Dir(st.path))
	}()
	if err != nil && !st.failing {
		st.log.Error("vpn: state file not written: the epochs stay as they are", "err", err)
	}
	st.failing = err != nil
	return err
}

// syncDir syncs a directory, so that a rename in it is on disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
