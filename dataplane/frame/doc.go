// Package frame is the contract between the pipeline and the ports: what
// a port implements and what it reports. It is pure Go, builds on every
// OS and imports nothing of the project but the pure packages.
package frame
