#include "textflag.h"

// Poly1305 on 8 lanes with AVX-512 IFMA (see poly_amd64.go for the lanes).
//
// A lane holds h = h0 + h1·2^44 + h2·2^88. Its product with a power
// r = r0 + r1·2^44 + r2·2^88 has terms at 2^132 and 2^176, which are 20 and
// 20·2^44 mod p (2^132 = 4·2^130 = 4·5), so with s1 = 20·r1, s2 = 20·r2:
//
//	d0 = h0·r0 + h1·s2 + h2·s1   (at 2^0)
//	d1 = h0·r1 + h1·r0 + h2·s2   (at 2^44)
//	d2 = h0·r2 + h1·r1 + h2·r0   (at 2^88)
//
// VPMADD52LUQ adds the low 52 bits of the product of two 52-bit numbers,
// VPMADD52HUQ the high 52 bits, which weigh 2^52 = 2^44·2^8. So with the
// sums of the low halves d0l, d1l, d2l and of the high halves d0h, d1h, T:
//
//	L0 = d0l, L1 = d1l + d0h<<8, L2 = d2l + d1h<<8, and T at 2^140 = 5·2^10
//
// A step computes h·r + m, m the lane's next block (none after the last
// step), whose limbs start the sums d0l, d1l, d2l. It carries every limb
// once, in parallel, and folds what is above 2^130 back times 5:
//
//	c0 = L0>>44, c1 = L1>>44, c2 = L2>>42 (at 2^130)
//	u  = L0 mod 2^44 + 5·2^10·T, c3 = u>>44
//	h0 = u mod 2^44 + 5·c2, h1 = L1 mod 2^44 + c0 + c3, h2 = L2 mod 2^42 + c1
//
// h2 is ready first and h0 last (vector adds and shifts take 2 cycles on
// Zen 5, IFMA 4), so the products of the next step take h2, h1, h0 in that
// order.
//
// Bounds. Limbs enter the products below 2^44 + 2^14, 2^44 + 2^10 and
// 2^42 + 2^10, or in the first step, h + m with h < 2^131 in lane 0, below
// 2^45, 2^45 and 2^43.4. The powers, below 2^131, have limbs below 2^44,
// 2^44 and 2^43, and s1 < 2^48.4, s2 < 2^47.4: every IFMA input is below
// 2^52. Then d0 < 2^93.2, d1 < 2^91.4, d2 < 2^89.9; L0, L1, L2 < 2^53.7
// (three low halves and a message limb); d0h<<8 < 2^49.2, d1h<<8 < 2^47.4,
// 5·2^10·T < 2^50.2. So c0, c1 < 2^9.7, c2 < 2^11.6, u < 2^50.3, c3 < 2^6.3,
// which keeps the new limbs within the bounds they entered with. No sum
// comes near 2^64.
//
// Registers: Z0-Z2 h, Z3-Z7 r0 r1 r2 s1 s2 (r^8 in the loop, each lane's
// last power at the end), Z8 2^44-1, Z9 2^42-1, Z10 2^40, Z11-Z13 d0l d1l
// d2l, Z14-Z16 d0h d1h T, Z17-Z20 temporaries; AX h, BX tab, SI msg,
// CX bytes left.

// LOADM sets Z11-Z13 to the limbs of the 8 blocks at SI, with their 2^128.
#define LOADM \
	VMOVDQU64   0(SI), Z17; /* blocks 0-3, two words each */ \
	VMOVDQU64   64(SI), Z18; /* blocks 4-7 */ \
	VPUNPCKLQDQ Z18, Z17, Z19; /* low words, blocks 0 4 1 5 2 6 3 7 */ \
	VPUNPCKHQDQ Z18, Z17, Z20; /* high words */ \
	VPANDQ      Z8, Z19, Z11; /* limb 0 */ \
	VPSRLQ      $44, Z19, Z12; \
	VPSLLQ      $20, Z20, Z18; \
	VPTERNLOGQ  $0xa8, Z8, Z18, Z12; /* limb 1: (lo>>44 | hi<<20) & mask44 */ \
	VPSRLQ      $24, Z20, Z13; \
	VPORQ       Z10, Z13, Z13 /* limb 2, with 2^128 = 2^40·2^88 */

// MULR sets h = h·r + (Z11-Z13), r being R0 R1 R2 with S1 = 20·R1 and
// S2 = 20·R2, carried as above.
#define MULR(R0, R1, R2, S1, S2) \
	VPXORQ      Z14, Z14, Z14; \
	VPXORQ      Z15, Z15, Z15; \
	VPXORQ      Z16, Z16, Z16; \
	VPMADD52HUQ S1, Z2, Z14; \
	VPMADD52HUQ S2, Z2, Z15; \
	VPMADD52HUQ R0, Z2, Z16; \
	VPMADD52LUQ S1, Z2, Z11; \
	VPMADD52LUQ S2, Z2, Z12; \
	VPMADD52LUQ R0, Z2, Z13; \
	VPMADD52HUQ S2, Z1, Z14; \
	VPMADD52HUQ R0, Z1, Z15; \
	VPMADD52HUQ R1, Z1, Z16; \
	VPMADD52LUQ S2, Z1, Z11; \
	VPMADD52LUQ R0, Z1, Z12; \
	VPMADD52LUQ R1, Z1, Z13; \
	VPMADD52HUQ R0, Z0, Z14; \
	VPMADD52HUQ R1, Z0, Z15; \
	VPMADD52HUQ R2, Z0, Z16; \
	VPMADD52LUQ R0, Z0, Z11; \
	VPMADD52LUQ R1, Z0, Z12; \
	VPMADD52LUQ R2, Z0, Z13; \
	VPSLLQ      $8, Z14, Z14; \
	VPSLLQ      $8, Z15, Z15; \
	VPSLLQ      $10, Z16, Z17; \
	VPSLLQ      $12, Z16, Z16; \
	VPSRLQ      $44, Z11, Z18; /* c0 */ \
	VPANDQ      Z8, Z11, Z11; \
	VPADDQ      Z14, Z12, Z12; /* L1 */ \
	VPADDQ      Z15, Z13, Z13; /* L2 */ \
	VPADDQ      Z17, Z11, Z11; \
	VPSRLQ      $44, Z12, Z14; /* c1 */ \
	VPSRLQ      $42, Z13, Z15; /* c2 */ \
	VPANDQ      Z8, Z12, Z12; \
	VPANDQ      Z9, Z13, Z13; \
	VPADDQ      Z16, Z11, Z11; /* u */ \
	VPADDQ      Z14, Z13, Z2; /* h2 */ \
	VPADDQ      Z18, Z12, Z12; \
	VPSRLQ      $44, Z11, Z16; /* c3 */ \
	VPANDQ      Z8, Z11, Z11; \
	VPSLLQ      $2, Z15, Z17; \
	VPADDQ      Z16, Z12, Z1; /* h1 */ \
	VPADDQ      Z15, Z11, Z11; \
	VPADDQ      Z17, Z11, Z0 /* h0 */

// HSUM stores the sum of the 8 lanes of Z at off(AX), using Z11.
#define HSUM(Z, Y, X, off) \
	VEXTRACTI64X4 $1, Z, Y11; \
	VPADDQ        Y11, Y, Y; \
	VEXTRACTI128  $1, Y, X11; \
	VPADDQ        X11, X, X; \
	VPSHUFD       $0x4e, X, X11; \
	VPADDQ        X11, X, X; \
	VMOVQ         X, off(AX)

// func polyBlocksAVX512(h *[3]uint64, tab *[5][8]uint64, msg []byte)
TEXT ·polyBlocksAVX512(SB), NOSPLIT, $0-40
	MOVQ h+0(FP), AX
	MOVQ tab+8(FP), BX
	MOVQ msg_base+16(FP), SI
	MOVQ msg_len+24(FP), CX

	MOVQ         $0xfffffffffff, DX
	VPBROADCASTQ DX, Z8
	MOVQ         $0x3ffffffffff, DX
	VPBROADCASTQ DX, Z9
	MOVQ         $0x10000000000, DX
	VPBROADCASTQ DX, Z10

	// h into lane 0 (VMOVQ clears the other lanes), plus the first blocks;
	// r^8 into every lane.
	VMOVQ        0(AX), X0
	VMOVQ        8(AX), X1
	VMOVQ        16(AX), X2
	LOADM
	VPADDQ       Z11, Z0, Z0
	VPADDQ       Z12, Z1, Z1
	VPADDQ       Z13, Z2, Z2
	VPBROADCASTQ 0(BX), Z3
	VPBROADCASTQ 64(BX), Z4
	VPBROADCASTQ 128(BX), Z5
	VPBROADCASTQ 192(BX), Z6
	VPBROADCASTQ 256(BX), Z7
	ADDQ         $128, SI
	SUBQ         $128, CX
	JZ           last

loop:
	LOADM
	MULR(Z3, Z4, Z5, Z6, Z7)
	ADDQ $128, SI
	SUBQ $128, CX
	JNZ  loop

last:
	// Each lane's last power, and no blocks to add.
	VMOVDQU64 0(BX), Z3
	VMOVDQU64 64(BX), Z4
	VMOVDQU64 128(BX), Z5
	VMOVDQU64 192(BX), Z6
	VMOVDQU64 256(BX), Z7
	VPXORQ    Z11, Z11, Z11
	VPXORQ    Z12, Z12, Z12
	VPXORQ    Z13, Z13, Z13
	MULR(Z3, Z4, Z5, Z6, Z7)

	HSUM(Z0, Y0, X0, 0)
	HSUM(Z1, Y1, X1, 8)
	HSUM(Z2, Y2, X2, 16)
	VZEROUPPER
	RET
