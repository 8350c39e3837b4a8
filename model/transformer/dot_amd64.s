#include "textflag.h"

// func dotAVX2(a, b *float32, n int) float32
// n > 0, a multiple of 16. Two 8-lane FMA accumulators (elements k mod 16
// < 8 and ≥ 8), added, then the lanes reduced as ((l0+l4)+(l2+l6)) +
// ((l1+l5)+(l3+l7)) — the same order dot4AVX2 uses for each of its rows.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

dotloop:
	VMOVUPS (DI), Y8
	VMOVUPS 32(DI), Y9
	VFMADD231PS (SI), Y8, Y0
	VFMADD231PS 32(SI), Y9, Y1
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ  dotloop

	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVHLPS     X0, X0, X1
	VADDPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+24(FP)
	RET

// func dot4AVX2(a0, a1, a2, a3, b *float32, n int) (s0, s1, s2, s3 float32)
// Four rows against one b, each row exactly as dotAVX2 computes it.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-64
	MOVQ a0+0(FP), R8
	MOVQ a1+8(FP), R9
	MOVQ a2+16(FP), R10
	MOVQ a3+24(FP), R11
	MOVQ b+32(FP), DI
	MOVQ n+40(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

dot4loop:
	VMOVUPS     (DI), Y8
	VMOVUPS     32(DI), Y9
	VFMADD231PS (R8), Y8, Y0
	VFMADD231PS 32(R8), Y9, Y1
	VFMADD231PS (R9), Y8, Y2
	VFMADD231PS 32(R9), Y9, Y3
	VFMADD231PS (R10), Y8, Y4
	VFMADD231PS 32(R10), Y9, Y5
	VFMADD231PS (R11), Y8, Y6
	VFMADD231PS 32(R11), Y9, Y7
	ADDQ        $64, R8
	ADDQ        $64, R9
	ADDQ        $64, R10
	ADDQ        $64, R11
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         dot4loop

	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVHLPS     X0, X0, X1
	VADDPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0
	MOVSS        X0, s0+48(FP)

	VADDPS       Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VADDPS       X3, X2, X2
	VMOVHLPS     X2, X2, X3
	VADDPS       X3, X2, X2
	VMOVSHDUP    X2, X3
	VADDSS       X3, X2, X2
	MOVSS        X2, s1+52(FP)

	VADDPS       Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VMOVHLPS     X4, X4, X5
	VADDPS       X5, X4, X4
	VMOVSHDUP    X4, X5
	VADDSS       X5, X4, X4
	MOVSS        X4, s2+56(FP)

	VADDPS       Y7, Y6, Y6
	VEXTRACTF128 $1, Y6, X7
	VADDPS       X7, X6, X6
	VMOVHLPS     X6, X6, X7
	VADDPS       X7, X6, X6
	VMOVSHDUP    X6, X7
	VADDSS       X7, X6, X6
	MOVSS        X6, s3+60(FP)
	VZEROUPPER
	RET
