//go:build amd64

package segment

import "golang.org/x/sys/cpu"

// useAVX2 selects the 256-bit kernels; cpu.X86.HasAVX2 already includes the
// check that the OS saves the YMM state. Every amd64 CPU has SSE2, so the
// 128-bit kernels are the fallback.
var useAVX2 = cpu.X86.HasAVX2

// The assembly kernels (csum_amd64.s) implement the accumulator model of
// sum.go: the returned value folds to the same 16-bit sum as sumGeneric
// would return for the same acc, but need not be equal to it as a uint64.

// sumAVX2 returns acc plus the one's complement sum of b. Requires AVX2.
//
//go:noescape
func sumAVX2(b []byte, acc uint64) uint64

// sumSSE2 returns acc plus the one's complement sum of b.
//
//go:noescape
func sumSSE2(b []byte, acc uint64) uint64

// copySumAVX2 copies src to dst[:len(src)] and returns acc plus the one's
// complement sum of src, loading each byte once. len(dst) must be at least
// len(src); dst and src must be disjoint or start at the same address (then
// only the sum is computed). Requires AVX2.
//
//go:noescape
func copySumAVX2(dst, src []byte, acc uint64) uint64

// copySumSSE2 is copySumAVX2 with 128-bit vectors.
//
//go:noescape
func copySumSSE2(dst, src []byte, acc uint64) uint64

// sum returns acc plus the one's complement sum of b. It is implemented in
// assembly as a jump to sumAVX2 or sumSSE2, to spare a second call.
//
//go:noescape
func sum(b []byte, acc uint64) uint64

// copySumAsm jumps to copySumAVX2 or copySumSSE2.
//
//go:noescape
func copySumAsm(dst, src []byte, acc uint64) uint64

// copySum copies src into dst (len(dst) >= len(src)) and returns acc plus
// the one's complement sum of src, reading each byte once. dst and src are
// either disjoint or start at the same address; in the latter case the
// kernels skip the stores of their main loop. Small enough to be inlined.
func copySum(dst, src []byte, acc uint64) uint64 {
	return copySumAsm(dst[:len(src)], src, acc) // the kernels trust the length: check it here
}
