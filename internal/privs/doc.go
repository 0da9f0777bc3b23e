// Package privs drops a Linux process's privileges once its set-up is
// done, for the project's binaries (cmd/udpfwd, cmd/wggso): Drop leaves
// every thread with the capabilities the caller names (those of them the
// process has), cuts the bounding set to them and sets and locks the
// securebits where the process may (CAP_SETPCAP), optionally switches to
// another user (an Account), sets no_new_privs, and reads all of it back.
//
// Capabilities are per thread, and Drop changes every thread of the
// process with syscall.AllThreadsSyscall, which a binary built with cgo
// cannot use: there Drop and LookupAccount fail with ErrNoAllThreads
// before changing anything. Build with CGO_ENABLED=0.
//
// Drop is for a process's main path, never for a test binary that goes
// on running tests: what it takes away does not come back. It needs
// Linux; elsewhere the package is empty.
package privs
