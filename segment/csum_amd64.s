//go:build amd64

#include "textflag.h"

// One's complement sum kernels (see csum.go for the accumulator model).
//
// Algorithm. The data is read as little-endian 64-bit lanes x = hi<<32 | lo,
// and every 32-bit half is to be added up exactly; since 2^16 = 1 (mod 0xffff),
// the plain integer sum of the 32-bit words folds to the same 16-bit one's
// complement sum as the 16-bit words do. Instead of zero-extending the halves
// (two shuffles per vector), each lane keeps two accumulators:
//
//	F += x        (mod 2^64: the low halves add up with their carries into
//	               the high half, the high halves wrap away)
//	H += x >> 32  (exact: the sum of the high halves)
//
// Then F = L + H<<32 (mod 2^64), where L is the exact sum of the low halves,
// so L = F - H<<32 (mod 2^64), and the lane's exact sum is L + H. Both L and H
// are below 2^32 per vector added, so nothing overflows for any buffer
// shorter than 2^34 bytes. That is one shift and two adds per vector, no
// carry chain, and the F/H pairs are split four ways so the adds of an
// unrolled iteration are independent.
//
// At the end the lanes are added (exactly, the totals are small), the result
// is added to acc with end-around carry, and the last < 32 (AVX2) or < 16
// (SSE2) bytes are summed as 16/8/4/2/1-byte scalar words with ADC. An odd
// last byte is added as the low byte of a little-endian word, like sumTail:
// the data starts at an even offset, so that byte is the high byte of a
// network-order word.
//
// The copy kernels do the same on each loaded vector and also store it to
// dst: one load, one store, one shift and two adds per vector. dst == src is
// the only overlap callers allow: then the main loop skips its stores (a copy
// of the sum loop), and the few stores of the short loop and the tail write
// back the bytes they just read.
//
// Loop structure: the main loop handles 128 (SSE2: 64) bytes a round with
// SI/DI pointing past its data and BX counting up from minus its length to
// 0, so the loop control is a single ADDQ/JNZ; the loop is bound by the
// number of instructions it issues, and the usual pointer and length updates
// cost 20% at L1-resident sizes. Then 32 (16) bytes at a time, then the tail.
//
// Register use (AVX2; SSE2 uses the X registers the same way):
//	SI src, DI dst, CX bytes left, BX loop index, AX running acc,
//	DX/BX scalar temps
//	Y0-Y3 data, Y4-Y7 data>>32, Y8-Y11 F accumulators, Y12-Y15 H accumulators

// func sum(b []byte, acc uint64) uint64
// Tail-jumps to the kernel for this CPU; the kernels take the same
// arguments, and with no frame of its own the jump leaves them in place.
TEXT ·sum(SB), NOSPLIT, $0-40
	CMPB ·useAVX2(SB), $0
	JNE  avx2
	JMP  ·sumSSE2(SB)

avx2:
	JMP ·sumAVX2(SB)

// func copySumAsm(dst, src []byte, acc uint64) uint64
TEXT ·copySumAsm(SB), NOSPLIT, $0-64
	CMPB ·useAVX2(SB), $0
	JNE  avx2
	JMP  ·copySumSSE2(SB)

avx2:
	JMP ·copySumAVX2(SB)

// func sumAVX2(b []byte, acc uint64) uint64
TEXT ·sumAVX2(SB), NOSPLIT, $0-40
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	MOVQ acc+24(FP), AX
	CMPQ CX, $32
	JB   tail

	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	VPXOR Y12, Y12, Y12
	VPXOR Y13, Y13, Y13
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	MOVQ  CX, BX
	ANDQ  $~127, BX // BX = bytes for the 128-byte loop
	JZ    loop32
	ANDQ  $127, CX  // CX = bytes left after it
	ADDQ  BX, SI    // point past the loop's data and count
	NEGQ  BX        // BX up from -len to 0: one ADDQ/JNZ per round

loop128: // 128 bytes a round: four independent F/H pairs
	VMOVDQU 0(SI)(BX*1), Y0
	VMOVDQU 32(SI)(BX*1), Y1
	VMOVDQU 64(SI)(BX*1), Y2
	VMOVDQU 96(SI)(BX*1), Y3
	VPSRLQ  $32, Y0, Y4
	VPSRLQ  $32, Y1, Y5
	VPSRLQ  $32, Y2, Y6
	VPSRLQ  $32, Y3, Y7
	VPADDQ  Y0, Y8, Y8
	VPADDQ  Y1, Y9, Y9
	VPADDQ  Y2, Y10, Y10
	VPADDQ  Y3, Y11, Y11
	VPADDQ  Y4, Y12, Y12
	VPADDQ  Y5, Y13, Y13
	VPADDQ  Y6, Y14, Y14
	VPADDQ  Y7, Y15, Y15
	ADDQ    $128, BX
	JNZ     loop128
	CMPQ    CX, $32
	JB      reduce

loop32: // 32..127 bytes left: one vector at a time into the first pair
	VMOVDQU (SI), Y0
	VPSRLQ  $32, Y0, Y4
	VPADDQ  Y0, Y8, Y8
	VPADDQ  Y4, Y12, Y12
	ADDQ    $32, SI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     loop32

reduce:
	VPADDQ       Y9, Y8, Y8    // F = sum of the F accumulators (mod 2^64)
	VPADDQ       Y11, Y10, Y10
	VPADDQ       Y10, Y8, Y8
	VPADDQ       Y13, Y12, Y12 // H = sum of the H accumulators (exact)
	VPADDQ       Y15, Y14, Y14
	VPADDQ       Y14, Y12, Y12
	VPSLLQ       $32, Y12, Y13
	VPSUBQ       Y13, Y8, Y8   // L = F - H<<32
	VPADDQ       Y12, Y8, Y8   // L + H, per lane
	VEXTRACTI128 $1, Y8, X9    // add the four lanes
	VPADDQ       X9, X8, X8
	VPSHUFD      $0x4e, X8, X9
	VPADDQ       X9, X8, X8
	VMOVQ        X8, DX
	VZEROUPPER
	ADDQ         DX, AX
	ADCQ         $0, AX

tail: // CX < 32 bytes left
	TESTQ $16, CX
	JZ    tail8
	ADDQ  0(SI), AX
	ADCQ  8(SI), AX
	ADCQ  $0, AX
	ADDQ  $16, SI

tail8:
	JMP sumTail<>(SB)

// func copySumAVX2(dst, src []byte, acc uint64) uint64
TEXT ·copySumAVX2(SB), NOSPLIT, $0-64
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), AX
	CMPQ CX, $32
	JB   tail

	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	VPXOR Y12, Y12, Y12
	VPXOR Y13, Y13, Y13
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	MOVQ  CX, BX
	ANDQ  $~127, BX // BX = bytes for the 128-byte loop
	JZ    loop32
	ANDQ  $127, CX  // CX = bytes left after it
	ADDQ  BX, SI    // point past the loop's data and count
	ADDQ  BX, DI
	NEGQ  BX        // BX up from -len to 0: one ADDQ/JNZ per round
	CMPQ  SI, DI
	JEQ   aliased128

loop128: // load 128 bytes, store them, then accumulate as in sumAVX2
	VMOVDQU 0(SI)(BX*1), Y0
	VMOVDQU 32(SI)(BX*1), Y1
	VMOVDQU 64(SI)(BX*1), Y2
	VMOVDQU 96(SI)(BX*1), Y3
	VMOVDQU Y0, 0(DI)(BX*1)
	VMOVDQU Y1, 32(DI)(BX*1)
	VMOVDQU Y2, 64(DI)(BX*1)
	VMOVDQU Y3, 96(DI)(BX*1)
	VPSRLQ  $32, Y0, Y4
	VPSRLQ  $32, Y1, Y5
	VPSRLQ  $32, Y2, Y6
	VPSRLQ  $32, Y3, Y7
	VPADDQ  Y0, Y8, Y8
	VPADDQ  Y1, Y9, Y9
	VPADDQ  Y2, Y10, Y10
	VPADDQ  Y3, Y11, Y11
	VPADDQ  Y4, Y12, Y12
	VPADDQ  Y5, Y13, Y13
	VPADDQ  Y6, Y14, Y14
	VPADDQ  Y7, Y15, Y15
	ADDQ    $128, BX
	JNZ     loop128
	JMP     rest

aliased128: // dst == src: the loop of sumAVX2, no stores needed (the few
	// of loop32 and the tail store bytes back where they were read)
	VMOVDQU 0(SI)(BX*1), Y0
	VMOVDQU 32(SI)(BX*1), Y1
	VMOVDQU 64(SI)(BX*1), Y2
	VMOVDQU 96(SI)(BX*1), Y3
	VPSRLQ  $32, Y0, Y4
	VPSRLQ  $32, Y1, Y5
	VPSRLQ  $32, Y2, Y6
	VPSRLQ  $32, Y3, Y7
	VPADDQ  Y0, Y8, Y8
	VPADDQ  Y1, Y9, Y9
	VPADDQ  Y2, Y10, Y10
	VPADDQ  Y3, Y11, Y11
	VPADDQ  Y4, Y12, Y12
	VPADDQ  Y5, Y13, Y13
	VPADDQ  Y6, Y14, Y14
	VPADDQ  Y7, Y15, Y15
	ADDQ    $128, BX
	JNZ     aliased128

rest:
	CMPQ    CX, $32
	JB      reduce

loop32:
	VMOVDQU (SI), Y0
	VMOVDQU Y0, (DI)
	VPSRLQ  $32, Y0, Y4
	VPADDQ  Y0, Y8, Y8
	VPADDQ  Y4, Y12, Y12
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JAE     loop32

reduce: // as in sumAVX2
	VPADDQ       Y9, Y8, Y8
	VPADDQ       Y11, Y10, Y10
	VPADDQ       Y10, Y8, Y8
	VPADDQ       Y13, Y12, Y12
	VPADDQ       Y15, Y14, Y14
	VPADDQ       Y14, Y12, Y12
	VPSLLQ       $32, Y12, Y13
	VPSUBQ       Y13, Y8, Y8
	VPADDQ       Y12, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDQ       X9, X8, X8
	VPSHUFD      $0x4e, X8, X9
	VPADDQ       X9, X8, X8
	VMOVQ        X8, DX
	VZEROUPPER
	ADDQ         DX, AX
	ADCQ         $0, AX

tail: // CX < 32 bytes left: copy and add them as scalar words
	TESTQ $16, CX
	JZ    tail8
	MOVQ  0(SI), DX
	MOVQ  8(SI), BX
	MOVQ  DX, 0(DI)
	MOVQ  BX, 8(DI)
	ADDQ  DX, AX
	ADCQ  BX, AX
	ADCQ  $0, AX
	ADDQ  $16, SI
	ADDQ  $16, DI

tail8:
	JMP copyTail<>(SB)

// func sumSSE2(b []byte, acc uint64) uint64
// sumAVX2 with 16-byte vectors: 64 bytes a round, then 16 at a time, then
// a scalar tail of < 16 bytes.
TEXT ·sumSSE2(SB), NOSPLIT, $0-40
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	MOVQ acc+24(FP), AX
	CMPQ CX, $16
	JB   tail8

	PXOR X8, X8
	PXOR X9, X9
	PXOR X10, X10
	PXOR X11, X11
	PXOR X12, X12
	PXOR X13, X13
	PXOR X14, X14
	PXOR X15, X15
	MOVQ  CX, BX
	ANDQ  $~63, BX  // BX = bytes for the 64-byte loop
	JZ    loop16
	ANDQ  $63, CX   // CX = bytes left after it
	ADDQ  BX, SI    // point past the loop's data and count
	NEGQ  BX        // BX up from -len to 0: one ADDQ/JNZ per round

loop64:
	MOVOU 0(SI)(BX*1), X0
	MOVOU 16(SI)(BX*1), X1
	MOVOU 32(SI)(BX*1), X2
	MOVOU 48(SI)(BX*1), X3
	MOVO  X0, X4
	MOVO  X1, X5
	MOVO  X2, X6
	MOVO  X3, X7
	PSRLQ $32, X4
	PSRLQ $32, X5
	PSRLQ $32, X6
	PSRLQ $32, X7
	PADDQ X0, X8
	PADDQ X1, X9
	PADDQ X2, X10
	PADDQ X3, X11
	PADDQ X4, X12
	PADDQ X5, X13
	PADDQ X6, X14
	PADDQ X7, X15
	ADDQ  $64, BX
	JNZ   loop64
	CMPQ  CX, $16
	JB    reduce

loop16:
	MOVOU (SI), X0
	MOVO  X0, X4
	PSRLQ $32, X4
	PADDQ X0, X8
	PADDQ X4, X12
	ADDQ  $16, SI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   loop16

reduce:
	PADDQ  X9, X8   // F
	PADDQ  X11, X10
	PADDQ  X10, X8
	PADDQ  X13, X12 // H
	PADDQ  X15, X14
	PADDQ  X14, X12
	MOVO   X12, X13
	PSLLQ  $32, X13
	PSUBQ  X13, X8  // L = F - H<<32
	PADDQ  X12, X8  // L + H
	PSHUFD $0x4e, X8, X9
	PADDQ  X9, X8
	MOVQ   X8, DX
	ADDQ   DX, AX
	ADCQ   $0, AX

tail8:
	JMP sumTail<>(SB)

// func copySumSSE2(dst, src []byte, acc uint64) uint64
TEXT ·copySumSSE2(SB), NOSPLIT, $0-64
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ acc+48(FP), AX
	CMPQ CX, $16
	JB   tail8

	PXOR X8, X8
	PXOR X9, X9
	PXOR X10, X10
	PXOR X11, X11
	PXOR X12, X12
	PXOR X13, X13
	PXOR X14, X14
	PXOR X15, X15
	MOVQ  CX, BX
	ANDQ  $~63, BX  // BX = bytes for the 64-byte loop
	JZ    loop16
	ANDQ  $63, CX   // CX = bytes left after it
	ADDQ  BX, SI    // point past the loop's data and count
	ADDQ  BX, DI
	NEGQ  BX        // BX up from -len to 0: one ADDQ/JNZ per round
	CMPQ  SI, DI
	JEQ   aliased64

loop64:
	MOVOU 0(SI)(BX*1), X0
	MOVOU 16(SI)(BX*1), X1
	MOVOU 32(SI)(BX*1), X2
	MOVOU 48(SI)(BX*1), X3
	MOVOU X0, 0(DI)(BX*1)
	MOVOU X1, 16(DI)(BX*1)
	MOVOU X2, 32(DI)(BX*1)
	MOVOU X3, 48(DI)(BX*1)
	MOVO  X0, X4
	MOVO  X1, X5
	MOVO  X2, X6
	MOVO  X3, X7
	PSRLQ $32, X4
	PSRLQ $32, X5
	PSRLQ $32, X6
	PSRLQ $32, X7
	PADDQ X0, X8
	PADDQ X1, X9
	PADDQ X2, X10
	PADDQ X3, X11
	PADDQ X4, X12
	PADDQ X5, X13
	PADDQ X6, X14
	PADDQ X7, X15
	ADDQ  $64, BX
	JNZ   loop64
	JMP   rest

aliased64: // dst == src: the loop of sumSSE2, no stores needed
	MOVOU 0(SI)(BX*1), X0
	MOVOU 16(SI)(BX*1), X1
	MOVOU 32(SI)(BX*1), X2
	MOVOU 48(SI)(BX*1), X3
	MOVO  X0, X4
	MOVO  X1, X5
	MOVO  X2, X6
	MOVO  X3, X7
	PSRLQ $32, X4
	PSRLQ $32, X5
	PSRLQ $32, X6
	PSRLQ $32, X7
	PADDQ X0, X8
	PADDQ X1, X9
	PADDQ X2, X10
	PADDQ X3, X11
	PADDQ X4, X12
	PADDQ X5, X13
	PADDQ X6, X14
	PADDQ X7, X15
	ADDQ  $64, BX
	JNZ   aliased64

rest:
	CMPQ  CX, $16
	JB    reduce

loop16:
	MOVOU (SI), X0
	MOVOU X0, (DI)
	MOVO  X0, X4
	PSRLQ $32, X4
	PADDQ X0, X8
	PADDQ X4, X12
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   loop16

reduce:
	PADDQ  X9, X8
	PADDQ  X11, X10
	PADDQ  X10, X8
	PADDQ  X13, X12
	PADDQ  X15, X14
	PADDQ  X14, X12
	MOVO   X12, X13
	PSLLQ  $32, X13
	PSUBQ  X13, X8
	PADDQ  X12, X8
	PSHUFD $0x4e, X8, X9
	PADDQ  X9, X8
	MOVQ   X8, DX
	ADDQ   DX, AX
	ADCQ   $0, AX

tail8:
	JMP copyTail<>(SB)

// sumTail adds the last 0..15 bytes at SI (CX holds the count) to AX and
// returns it: the shared end of sumAVX2 and sumSSE2, reached by a jump
// (not a call), so it reads and writes their frame.
TEXT sumTail<>(SB), NOSPLIT|NOFRAME, $0-40
tail8:
	TESTQ $8, CX
	JZ    tail4
	ADDQ  (SI), AX
	ADCQ  $0, AX
	ADDQ  $8, SI

tail4:
	TESTQ $4, CX
	JZ    tail2
	MOVL  (SI), DX // zero-extends
	ADDQ  DX, AX
	ADCQ  $0, AX
	ADDQ  $4, SI

tail2:
	TESTQ   $2, CX
	JZ      tail1
	MOVWQZX (SI), DX
	ADDQ    DX, AX
	ADCQ    $0, AX
	ADDQ    $2, SI

tail1:
	TESTQ   $1, CX
	JZ      done
	MOVBQZX (SI), DX // odd last byte: low byte of an LE word
	ADDQ    DX, AX
	ADCQ    $0, AX

done:
	MOVQ AX, ret+32(FP)
	RET

// copyTail is sumTail that also stores each word at DI: the shared end of
// copySumAVX2 and copySumSSE2.
TEXT copyTail<>(SB), NOSPLIT|NOFRAME, $0-64
tail8:
	TESTQ $8, CX
	JZ    tail4
	MOVQ  (SI), DX
	MOVQ  DX, (DI)
	ADDQ  DX, AX
	ADCQ  $0, AX
	ADDQ  $8, SI
	ADDQ  $8, DI

tail4:
	TESTQ $4, CX
	JZ    tail2
	MOVL  (SI), DX
	MOVL  DX, (DI)
	ADDQ  DX, AX
	ADCQ  $0, AX
	ADDQ  $4, SI
	ADDQ  $4, DI

tail2:
	TESTQ   $2, CX
	JZ      tail1
	MOVWQZX (SI), DX
	MOVW    DX, (DI)
	ADDQ    DX, AX
	ADCQ    $0, AX
	ADDQ    $2, SI
	ADDQ    $2, DI

tail1:
	TESTQ   $1, CX
	JZ      done
	MOVBQZX (SI), DX
	MOVB    DX, (DI)
	ADDQ    DX, AX
	ADCQ    $0, AX

done:
	MOVQ AX, ret+56(FP)
	RET
