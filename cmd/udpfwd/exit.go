package main

// Exit statuses (see docs/udpfwd.md, EXIT STATUS).
const (
	exitOK      = 0 // stopped cleanly after SIGINT or SIGTERM, or -h
	exitFailure = 1 // set-up or runtime failure, or the drain deadline passed
	exitUsage   = 2 // bad flags or environment, found before touching the system
)
