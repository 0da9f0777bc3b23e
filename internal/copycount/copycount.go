// Package copycount counts the bytes of packets user space copies on the
// data path, in a test build: built with -tags copycount, every place the
// data path copies packet bytes from one buffer into another (the
// segmenter writing segments, the forwarder copying a super-packet whole
// into a frame, a wire source copying a received packet into the
// forwarder's buffer, an AF_XDP port gathering a multi-buffer chain)
// calls Add, and Bytes says how many bytes they copied. Tests divide that
// by the bytes a path moved to get its copies per super-packet (the
// TestCopies tests of the packages that build paths). In a normal build
// Add does nothing and is compiled away.
package copycount
