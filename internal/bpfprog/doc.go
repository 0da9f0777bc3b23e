// Package bpfprog holds what the ports' eBPF programs share. The C
// headers they are compiled from are in include: bpf.h, the part of the
// kernel's BPF interface they use, and redirect.h, the redirect
// prefixes' LPM tries (keys as internal/prefix encodes them), the header
// offsets of a packet's destination and neighbour discovery, which both
// the AF_XDP and the AF_PACKET port's programs match against. Each port
// compiles its programs with bpf2go (go generate; make generate) and
// commits the objects, so that building needs no C compiler.
//
// On the Go side (Linux), NewMaps creates a collection's maps once, to
// be kept across loads, LoadProgram loads one of its programs against
// them, and LoadError says why the kernel refused a program: its
// verifier, with the end of the verifier's log, or missing capabilities.
package bpfprog
