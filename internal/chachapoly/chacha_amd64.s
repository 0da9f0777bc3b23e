#include "textflag.h"

// xorKeyStream holds ChaCha20 states in one of three layouts, by the length
// left.
//
// Words, for inputs over 512 bytes: Zw holds word w of 16 blocks, block j
// in dword lane j. A quarter round is lane-wise adds, xors and VPROLDs on
// four registers, and the four of a column or diagonal round run side by
// side. Afterwards a 4x4 dword transpose within 128-bit lanes and a 4x4
// transpose of the lanes make Zj the 64 bytes of block j. A pass makes 32
// blocks, in two such sets, Z0-Z15 and Z16-Z31: every vector op has a
// latency of 2 cycles on Zen 5, a quarter round is a chain of 12, and the 4
// chains of one set fill half the ~4 ops a cycle the CPU issues (measured:
// a double round takes ~50 cycles for 16 blocks, ~57 for 32). The two sets
// fill the register file, so the frame holds Z28-Z31 while they serve the
// transpose of Z0-Z15.
//
// Rows, for the last <= 512 bytes: Z16-Z19 hold rows 0-3 (words 0-3, 4-7,
// ...) of blocks 0-3, block k in 128-bit lane k, and Z20-Z23 those of
// blocks 4-7. A quarter round on the rows is the column round of 4 blocks;
// VPSHUFD then turns rows 0, 2 and 3 to line the diagonals up as columns
// (row 1 stays, so no shuffle waits on its last op), and back. A 4x4
// transpose of the lanes makes each register one block. The chains make 20
// rounds last ~480 cycles however few blocks they make.
//
// General registers, for the last <= 64 bytes: one block, whose 20 rounds
// take half as long in scalar ops (1 cycle each). Words 0-7 and 12-15 stay
// in registers; words 8-11 take turns in R14 and R15, two at a time, the
// other two waiting in the frame.

// lanes holds the block counter offsets of the dword lanes of the words.
DATA lanes<>+0x00(SB)/4, $0
DATA lanes<>+0x04(SB)/4, $1
DATA lanes<>+0x08(SB)/4, $2
DATA lanes<>+0x0c(SB)/4, $3
DATA lanes<>+0x10(SB)/4, $4
DATA lanes<>+0x14(SB)/4, $5
DATA lanes<>+0x18(SB)/4, $6
DATA lanes<>+0x1c(SB)/4, $7
DATA lanes<>+0x20(SB)/4, $8
DATA lanes<>+0x24(SB)/4, $9
DATA lanes<>+0x28(SB)/4, $10
DATA lanes<>+0x2c(SB)/4, $11
DATA lanes<>+0x30(SB)/4, $12
DATA lanes<>+0x34(SB)/4, $13
DATA lanes<>+0x38(SB)/4, $14
DATA lanes<>+0x3c(SB)/4, $15
DATA lanes<>+0x40(SB)/4, $16
DATA lanes<>+0x44(SB)/4, $17
DATA lanes<>+0x48(SB)/4, $18
DATA lanes<>+0x4c(SB)/4, $19
DATA lanes<>+0x50(SB)/4, $20
DATA lanes<>+0x54(SB)/4, $21
DATA lanes<>+0x58(SB)/4, $22
DATA lanes<>+0x5c(SB)/4, $23
DATA lanes<>+0x60(SB)/4, $24
DATA lanes<>+0x64(SB)/4, $25
DATA lanes<>+0x68(SB)/4, $26
DATA lanes<>+0x6c(SB)/4, $27
DATA lanes<>+0x70(SB)/4, $28
DATA lanes<>+0x74(SB)/4, $29
DATA lanes<>+0x78(SB)/4, $30
DATA lanes<>+0x7c(SB)/4, $31
GLOBL lanes<>(SB), RODATA|NOPTR, $128

// rowlanes holds the block counter offsets of the rows 3 of blocks 0-3,
// then 4-7: word 0 of each 128-bit lane.
DATA rowlanes<>+0x00(SB)/4, $0
DATA rowlanes<>+0x10(SB)/4, $1
DATA rowlanes<>+0x20(SB)/4, $2
DATA rowlanes<>+0x30(SB)/4, $3
DATA rowlanes<>+0x40(SB)/4, $4
DATA rowlanes<>+0x50(SB)/4, $5
DATA rowlanes<>+0x60(SB)/4, $6
DATA rowlanes<>+0x70(SB)/4, $7
GLOBL rowlanes<>(SB), RODATA|NOPTR, $128

// LINE4 is one line of the quarter round (RFC 8439 §2.1), a += b; d ^= a;
// d <<<= n, for four independent quarter rounds.
#define LINE4(a0, b0, d0, a1, b1, d1, a2, b2, d2, a3, b3, d3, n) \
	VPADDD b0, a0, a0; VPADDD b1, a1, a1; VPADDD b2, a2, a2; VPADDD b3, a3, a3; \
	VPXORD a0, d0, d0; VPXORD a1, d1, d1; VPXORD a2, d2, d2; VPXORD a3, d3, d3; \
	VPROLD $n, d0, d0; VPROLD $n, d1, d1; VPROLD $n, d2, d2; VPROLD $n, d3, d3

// QR4 is four quarter rounds (ai, bi, ci, di) side by side.
#define QR4(a0, b0, c0, d0, a1, b1, c1, d1, a2, b2, c2, d2, a3, b3, c3, d3) \
	LINE4(a0, b0, d0, a1, b1, d1, a2, b2, d2, a3, b3, d3, 16); \
	LINE4(c0, d0, b0, c1, d1, b1, c2, d2, b2, c3, d3, b3, 12); \
	LINE4(a0, b0, d0, a1, b1, d1, a2, b2, d2, a3, b3, d3, 8); \
	LINE4(c0, d0, b0, c1, d1, b1, c2, d2, b2, c3, d3, b3, 7)

// ROWLINE is LINE4 for two quarter rounds.
#define ROWLINE(a0, b0, d0, a1, b1, d1, n) \
	VPADDD b0, a0, a0; VPADDD b1, a1, a1; VPXORD a0, d0, d0; VPXORD a1, d1, d1; \
	VPROLD $n, d0, d0; VPROLD $n, d1, d1

// ROWROUND is a round on the rows Z16-Z19 and Z20-Z23 of blocks 0-7.
#define ROWROUND \
	ROWLINE(Z16, Z17, Z19, Z20, Z21, Z23, 16); \
	ROWLINE(Z18, Z19, Z17, Z22, Z23, Z21, 12); \
	ROWLINE(Z16, Z17, Z19, Z20, Z21, Z23, 8); \
	ROWLINE(Z18, Z19, Z17, Z22, Z23, Z21, 7)

// SHUFFLEROWS rotates the words of each 128-bit lane of rows 0, 2 and 3 by
// the VPSHUFD selectors a, c and d.
#define SHUFFLEROWS(a, c, d) \
	VPSHUFD $a, Z16, Z16; VPSHUFD $a, Z20, Z20; VPSHUFD $d, Z19, Z19; VPSHUFD $d, Z23, Z23; \
	VPSHUFD $c, Z18, Z18; VPSHUFD $c, Z22, Z22

// SLINE2 is LINE4 for two quarter rounds on general registers.
#define SLINE2(a0, b0, d0, a1, b1, d1, n) \
	ADDL b0, a0; ADDL b1, a1; XORL a0, d0; XORL a1, d1; ROLL $n, d0; ROLL $n, d1

// SQR2 is two quarter rounds (ai, bi, ci, di) on general registers.
#define SQR2(a0, b0, c0, d0, a1, b1, c1, d1) \
	SLINE2(a0, b0, d0, a1, b1, d1, 16); SLINE2(c0, d0, b0, c1, d1, b1, 12); \
	SLINE2(a0, b0, d0, a1, b1, d1, 8); SLINE2(c0, d0, b0, c1, d1, b1, 7)

// TRANSPOSE32 transposes the 4x4 dwords in each 128-bit lane of a, b, c, d.
#define TRANSPOSE32(a, b, c, d, t0, t1, t2, t3) \
	VPUNPCKLDQ b, a, t0; VPUNPCKHDQ b, a, t1; VPUNPCKLDQ d, c, t2; VPUNPCKHDQ d, c, t3; \
	VPUNPCKLQDQ t2, t0, a; VPUNPCKHQDQ t2, t0, b; VPUNPCKLQDQ t3, t1, c; VPUNPCKHQDQ t3, t1, d

// TRANSPOSE128 transposes the 4x4 128-bit lanes of a, b, c, d.
#define TRANSPOSE128(a, b, c, d, t0, t1, t2, t3) \
	VSHUFI32X4 $0x44, b, a, t0; VSHUFI32X4 $0xee, b, a, t1; VSHUFI32X4 $0x44, d, c, t2; VSHUFI32X4 $0xee, d, c, t3; \
	VSHUFI32X4 $0x88, t2, t0, a; VSHUFI32X4 $0xdd, t2, t0, b; VSHUFI32X4 $0x88, t3, t1, c; VSHUFI32X4 $0xdd, t3, t1, d

// WORDSTOBLOCKS turns the words z0-z15 of 16 blocks into the blocks, in
// order: lane k of register i of a TRANSPOSE32 holds words 4g..4g+3 of
// block 4k+i, g its group.
#define WORDSTOBLOCKS(z0, z1, z2, z3, z4, z5, z6, z7, z8, z9, z10, z11, z12, z13, z14, z15, t0, t1, t2, t3) \
	TRANSPOSE32(z0, z1, z2, z3, t0, t1, t2, t3); TRANSPOSE32(z4, z5, z6, z7, t0, t1, t2, t3); \
	TRANSPOSE32(z8, z9, z10, z11, t0, t1, t2, t3); TRANSPOSE32(z12, z13, z14, z15, t0, t1, t2, t3); \
	TRANSPOSE128(z0, z4, z8, z12, t0, t1, t2, t3); TRANSPOSE128(z1, z5, z9, z13, t0, t1, t2, t3); \
	TRANSPOSE128(z2, z6, z10, z14, t0, t1, t2, t3); TRANSPOSE128(z3, z7, z11, z15, t0, t1, t2, t3)

// XOR64 XORs the 64 bytes at off(SI) with k into off(DI).
#define XOR64(k, off) VPXORD off(SI), k, k; VMOVDQU32 k, off(DI)

// XORNEXT XORs the next 64 bytes with k if 64 remain, or else jumps to last
// with k in Z0. It steps SI and DI by R12 and R13, which are 64 but for the
// first block of a keyed call.
#define XORNEXT(k) \
	VMOVDQA64 k, Z0; CMPQ CX, $64; JB last; \
	XOR64(k, 0); ADDQ R12, SI; ADDQ R13, DI; MOVQ $64, R12; MOVQ $64, R13; SUBQ $64, CX

// zero64 is the source of a keyed call's first block.
GLOBL zero64<>(SB), RODATA|NOPTR, $64

// func xorKeyStream(dst, src *byte, n int, state *[16]uint32, key *byte)
//
// With key nil, dst[:n] = src[:n] XOR the keystream from the state's
// counter. With key set, 0 < n < 1984, key[:64] gets the keystream block of
// the counter and dst[:n] = src[:n] XOR the keystream from the next: the
// call runs as if on 64 + n bytes whose first block is zero64 into key,
// which XORNEXT steps out of (the pass over 2,048 bytes and more, with its
// fixed offsets, is then never taken).
TEXT ·xorKeyStream(SB), NOSPLIT, $256-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ state+24(FP), AX
	MOVQ $64, R12
	MOVQ $64, R13
	MOVQ key+32(FP), BX
	TESTQ BX, BX
	JZ   wide
	LEAQ zero64<>(SB), R8
	MOVQ SI, R12
	SUBQ R8, R12
	MOVQ R8, SI
	MOVQ DI, R13
	SUBQ BX, R13
	MOVQ BX, DI
	ADDQ $64, CX

wide:
	CMPQ CX, $512
	JBE  rows

	// Words Z0-Z15 of blocks 0-15 and Z16-Z31 of 16-31.
	VPBROADCASTD 0(AX), Z0
	VPBROADCASTD 4(AX), Z1
	VPBROADCASTD 8(AX), Z2
	VPBROADCASTD 12(AX), Z3
	VPBROADCASTD 16(AX), Z4
	VPBROADCASTD 20(AX), Z5
	VPBROADCASTD 24(AX), Z6
	VPBROADCASTD 28(AX), Z7
	VPBROADCASTD 32(AX), Z8
	VPBROADCASTD 36(AX), Z9
	VPBROADCASTD 40(AX), Z10
	VPBROADCASTD 44(AX), Z11
	VPBROADCASTD 48(AX), Z12
	VPBROADCASTD 52(AX), Z13
	VPBROADCASTD 56(AX), Z14
	VPBROADCASTD 60(AX), Z15
	VMOVDQA32    Z0, Z16
	VMOVDQA32    Z1, Z17
	VMOVDQA32    Z2, Z18
	VMOVDQA32    Z3, Z19
	VMOVDQA32    Z4, Z20
	VMOVDQA32    Z5, Z21
	VMOVDQA32    Z6, Z22
	VMOVDQA32    Z7, Z23
	VMOVDQA32    Z8, Z24
	VMOVDQA32    Z9, Z25
	VMOVDQA32    Z10, Z26
	VMOVDQA32    Z11, Z27
	VMOVDQA32    Z12, Z28
	VMOVDQA32    Z13, Z29
	VMOVDQA32    Z14, Z30
	VMOVDQA32    Z15, Z31
	VPADDD       lanes<>(SB), Z12, Z12
	VPADDD       lanes<>+64(SB), Z28, Z28
	MOVL         $10, DX

wideRounds:
	QR4(Z0, Z4, Z8, Z12, Z1, Z5, Z9, Z13, Z2, Z6, Z10, Z14, Z3, Z7, Z11, Z15)
	QR4(Z16, Z20, Z24, Z28, Z17, Z21, Z25, Z29, Z18, Z22, Z26, Z30, Z19, Z23, Z27, Z31)
	QR4(Z0, Z5, Z10, Z15, Z1, Z6, Z11, Z12, Z2, Z7, Z8, Z13, Z3, Z4, Z9, Z14)
	QR4(Z16, Z21, Z26, Z31, Z17, Z22, Z27, Z28, Z18, Z23, Z24, Z29, Z19, Z20, Z25, Z30)
	DECL DX
	JNZ  wideRounds

	// Add the initial state (§2.3) and step the counter in it.
	VPADDD.BCST  0(AX), Z0, Z0
	VPADDD.BCST  4(AX), Z1, Z1
	VPADDD.BCST  8(AX), Z2, Z2
	VPADDD.BCST  12(AX), Z3, Z3
	VPADDD.BCST  16(AX), Z4, Z4
	VPADDD.BCST  20(AX), Z5, Z5
	VPADDD.BCST  24(AX), Z6, Z6
	VPADDD.BCST  28(AX), Z7, Z7
	VPADDD.BCST  32(AX), Z8, Z8
	VPADDD.BCST  36(AX), Z9, Z9
	VPADDD.BCST  40(AX), Z10, Z10
	VPADDD.BCST  44(AX), Z11, Z11
	VPADDD.BCST  52(AX), Z13, Z13
	VPADDD.BCST  56(AX), Z14, Z14
	VPADDD.BCST  60(AX), Z15, Z15
	VPADDD.BCST  0(AX), Z16, Z16
	VPADDD.BCST  4(AX), Z17, Z17
	VPADDD.BCST  8(AX), Z18, Z18
	VPADDD.BCST  12(AX), Z19, Z19
	VPADDD.BCST  16(AX), Z20, Z20
	VPADDD.BCST  20(AX), Z21, Z21
	VPADDD.BCST  24(AX), Z22, Z22
	VPADDD.BCST  28(AX), Z23, Z23
	VPADDD.BCST  32(AX), Z24, Z24
	VPADDD.BCST  36(AX), Z25, Z25
	VPADDD.BCST  40(AX), Z26, Z26
	VPADDD.BCST  44(AX), Z27, Z27
	VPADDD.BCST  52(AX), Z29, Z29
	VPADDD.BCST  56(AX), Z30, Z30
	VPADDD.BCST  60(AX), Z31, Z31
	VPADDD.BCST  48(AX), Z12, Z12
	VPADDD       lanes<>(SB), Z12, Z12
	VPADDD.BCST  48(AX), Z28, Z28
	VPADDD       lanes<>+64(SB), Z28, Z28
	ADDL         $32, 48(AX)

	VMOVDQU32 Z28, 0(SP)
	VMOVDQU32 Z29, 64(SP)
	VMOVDQU32 Z30, 128(SP)
	VMOVDQU32 Z31, 192(SP)
	WORDSTOBLOCKS(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, Z28, Z29, Z30, Z31)
	CMPQ      CX, $2048
	JB        wideTail0
	XOR64(Z0, 0)
	XOR64(Z1, 64)
	XOR64(Z2, 128)
	XOR64(Z3, 192)
	XOR64(Z4, 256)
	XOR64(Z5, 320)
	XOR64(Z6, 384)
	XOR64(Z7, 448)
	XOR64(Z8, 512)
	XOR64(Z9, 576)
	XOR64(Z10, 640)
	XOR64(Z11, 704)
	XOR64(Z12, 768)
	XOR64(Z13, 832)
	XOR64(Z14, 896)
	XOR64(Z15, 960)
	ADDQ      $1024, SI
	ADDQ      $1024, DI
	SUBQ      $1024, CX
	JMP       wide1

wideTail0:
	XORNEXT(Z0)
	XORNEXT(Z1)
	XORNEXT(Z2)
	XORNEXT(Z3)
	XORNEXT(Z4)
	XORNEXT(Z5)
	XORNEXT(Z6)
	XORNEXT(Z7)
	XORNEXT(Z8)
	XORNEXT(Z9)
	XORNEXT(Z10)
	XORNEXT(Z11)
	XORNEXT(Z12)
	XORNEXT(Z13)
	XORNEXT(Z14)
	XORNEXT(Z15)

wide1:
	VMOVDQU32 0(SP), Z28
	VMOVDQU32 64(SP), Z29
	VMOVDQU32 128(SP), Z30
	VMOVDQU32 192(SP), Z31
	WORDSTOBLOCKS(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31, Z0, Z1, Z2, Z3)
	CMPQ      CX, $1024
	JB        wideTail1
	XOR64(Z16, 0)
	XOR64(Z17, 64)
	XOR64(Z18, 128)
	XOR64(Z19, 192)
	XOR64(Z20, 256)
	XOR64(Z21, 320)
	XOR64(Z22, 384)
	XOR64(Z23, 448)
	XOR64(Z24, 512)
	XOR64(Z25, 576)
	XOR64(Z26, 640)
	XOR64(Z27, 704)
	XOR64(Z28, 768)
	XOR64(Z29, 832)
	XOR64(Z30, 896)
	XOR64(Z31, 960)
	ADDQ      $1024, SI
	ADDQ      $1024, DI
	SUBQ      $1024, CX
	JMP       wide

wideTail1:
	XORNEXT(Z16)
	XORNEXT(Z17)
	XORNEXT(Z18)
	XORNEXT(Z19)
	XORNEXT(Z20)
	XORNEXT(Z21)
	XORNEXT(Z22)
	XORNEXT(Z23)
	XORNEXT(Z24)
	XORNEXT(Z25)
	XORNEXT(Z26)
	XORNEXT(Z27)
	XORNEXT(Z28)
	XORNEXT(Z29)
	XORNEXT(Z30)
	VMOVDQA64 Z31, Z0
	JMP       last

rows:
	TESTQ CX, CX
	JZ    done
	CMPQ  CX, $64
	JBE   block

	// Rows Z16-Z19 of blocks 0-3 and Z20-Z23 of 4-7, the rows 3 also in
	// Z24 and Z25.
	VBROADCASTI32X4 0(AX), Z16
	VBROADCASTI32X4 16(AX), Z17
	VBROADCASTI32X4 32(AX), Z18
	VBROADCASTI32X4 48(AX), Z25
	VPADDD          rowlanes<>(SB), Z25, Z24
	VPADDD          rowlanes<>+64(SB), Z25, Z25
	VMOVDQA32       Z24, Z19
	VMOVDQA32       Z16, Z20
	VMOVDQA32       Z17, Z21
	VMOVDQA32       Z18, Z22
	VMOVDQA32       Z25, Z23
	MOVL            $10, DX

rowRounds:
	ROWROUND
	SHUFFLEROWS(0x93, 0x39, 0x4e)
	ROWROUND
	SHUFFLEROWS(0x39, 0x93, 0x4e)
	DECL DX
	JNZ  rowRounds

	VBROADCASTI32X4 0(AX), Z26
	VBROADCASTI32X4 16(AX), Z27
	VBROADCASTI32X4 32(AX), Z28
	VPADDD          Z26, Z16, Z16
	VPADDD          Z27, Z17, Z17
	VPADDD          Z28, Z18, Z18
	VPADDD          Z24, Z19, Z19
	VPADDD          Z26, Z20, Z20
	VPADDD          Z27, Z21, Z21
	VPADDD          Z28, Z22, Z22
	VPADDD          Z25, Z23, Z23
	TRANSPOSE128(Z16, Z17, Z18, Z19, Z26, Z27, Z28, Z29)
	TRANSPOSE128(Z20, Z21, Z22, Z23, Z26, Z27, Z28, Z29)
	XORNEXT(Z16)
	XORNEXT(Z17)
	XORNEXT(Z18)
	XORNEXT(Z19)
	XORNEXT(Z20)
	XORNEXT(Z21)
	XORNEXT(Z22)
	VMOVDQA64       Z23, Z0

last:
	// 0 <= CX <= 64 bytes remain, Z0 their keystream. The whole dwords go
	// through a masked load and store, the last 0-3 bytes through DX.
	MOVQ         CX, BX
	SHRQ         $2, CX
	MOVL         $1, DX
	SHLL         CX, DX
	DECL         DX
	KMOVW        DX, K1
	VMOVDQU32.Z  (SI), K1, Z1
	VPXORD       Z0, Z1, Z1
	VMOVDQU32    Z1, K1, (DI)
	ANDQ         $3, BX
	JZ           done
	VPBROADCASTD CX, Z1
	VPERMD       Z0, Z1, Z1
	VMOVD        X1, DX
	LEAQ         (SI)(CX*4), SI
	LEAQ         (DI)(CX*4), DI
	TESTQ        $2, BX
	JZ           lastByte
	MOVW         (SI), R8
	XORW         DX, R8
	MOVW         R8, (DI)
	SHRL         $16, DX
	ADDQ         $2, SI
	ADDQ         $2, DI

lastByte:
	TESTQ $1, BX
	JZ    done
	MOVB  (SI), R8
	XORB  DX, R8
	MOVB  R8, (DI)

done:
	VZEROUPPER
	RET

block:
	// 0 < CX <= 64: the keystream block is made at 0(SP), 64(SP) counts
	// the double rounds, and 72(SP)-88(SP) keep SI, DI and CX.
	MOVQ      SI, 72(SP)
	MOVQ      DI, 80(SP)
	MOVQ      CX, 88(SP)
	MOVQ      AX, R14
	MOVL      40(R14), R15
	MOVL      R15, 40(SP)
	MOVL      44(R14), R15
	MOVL      R15, 44(SP)
	MOVL      0(R14), AX
	MOVL      4(R14), BX
	MOVL      8(R14), CX
	MOVL      12(R14), DX
	MOVL      16(R14), SI
	MOVL      20(R14), DI
	MOVL      24(R14), R8
	MOVL      28(R14), R9
	MOVL      48(R14), R10
	MOVL      52(R14), R11
	MOVL      56(R14), R12
	MOVL      60(R14), R13
	MOVL      36(R14), R15
	MOVL      32(R14), R14
	MOVL      $10, 64(SP)

blockRounds:
	// Columns 0 and 1 with words 8 and 9, 2 and 3 with 10 and 11, then
	// diagonals 0 and 1 with 10 and 11, 2 and 3 with 8 and 9.
	SQR2(AX, SI, R14, R10, BX, DI, R15, R11)
	MOVL      R14, 32(SP)
	MOVL      R15, 36(SP)
	MOVL      40(SP), R14
	MOVL      44(SP), R15
	SQR2(CX, R8, R14, R12, DX, R9, R15, R13)
	SQR2(AX, DI, R14, R13, BX, R8, R15, R10)
	MOVL      R14, 40(SP)
	MOVL      R15, 44(SP)
	MOVL      32(SP), R14
	MOVL      36(SP), R15
	SQR2(CX, R9, R14, R11, DX, SI, R15, R12)
	DECL      64(SP)
	JNZ       blockRounds

	// Add the initial state and XOR the block as the last of a pass.
	MOVL      R14, 32(SP)
	MOVL      R15, 36(SP)
	MOVQ      state+24(FP), R14
	ADDL      0(R14), AX
	MOVL      AX, 0(SP)
	ADDL      4(R14), BX
	MOVL      BX, 4(SP)
	ADDL      8(R14), CX
	MOVL      CX, 8(SP)
	ADDL      12(R14), DX
	MOVL      DX, 12(SP)
	ADDL      16(R14), SI
	MOVL      SI, 16(SP)
	ADDL      20(R14), DI
	MOVL      DI, 20(SP)
	ADDL      24(R14), R8
	MOVL      R8, 24(SP)
	ADDL      28(R14), R9
	MOVL      R9, 28(SP)
	ADDL      48(R14), R10
	MOVL      R10, 48(SP)
	ADDL      52(R14), R11
	MOVL      R11, 52(SP)
	ADDL      56(R14), R12
	MOVL      R12, 56(SP)
	ADDL      60(R14), R13
	MOVL      R13, 60(SP)
	MOVL      32(SP), R15
	ADDL      32(R14), R15
	MOVL      R15, 32(SP)
	MOVL      36(SP), R15
	ADDL      36(R14), R15
	MOVL      R15, 36(SP)
	MOVL      40(SP), R15
	ADDL      40(R14), R15
	MOVL      R15, 40(SP)
	MOVL      44(SP), R15
	ADDL      44(R14), R15
	MOVL      R15, 44(SP)
	VMOVDQU32 0(SP), Z0
	MOVQ      72(SP), SI
	MOVQ      80(SP), DI
	MOVQ      88(SP), CX
	JMP       last
