package chachapoly

import "golang.org/x/sys/cpu"

// useAVX512 reports whether this CPU and OS run the AVX-512 code: ChaCha20
// needs F and VL (VPROLD on every vector length), Poly1305 IFMA.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512IFMA
