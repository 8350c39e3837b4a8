#include "textflag.h"

// GEMM micro-kernels over packed weights: the transposed weight is stored
// in panels of 16 columns, panel p holding [k][16] contiguously (see
// packPanels). out[r][c] = Σ_k x_r[k] · panel[k][c], each element one
// chain of FMAs over k = 0, 1, … in order, starting from 0. Every kernel
// computes an element with exactly that arithmetic, so a result does not
// depend on the kernel, tile or rows it was computed with. k ≥ 1.

// func gemm4x16(x0, x1, x2, x3, p *float32, k int, o0, o1, o2, o3 *float32)
TEXT ·gemm4x16(SB), NOSPLIT, $0-80
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), R11
	MOVQ x2+16(FP), R12
	MOVQ x3+24(FP), R13
	MOVQ p+32(FP), DI
	MOVQ k+40(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop4x16:
	VMOVUPS      (DI), Y8
	VMOVUPS      32(DI), Y9
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (R11), Y11
	VBROADCASTSS (R12), Y12
	VBROADCASTSS (R13), Y13
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $4, SI
	ADDQ         $4, R11
	ADDQ         $4, R12
	ADDQ         $4, R13
	ADDQ         $64, DI
	DECQ         CX
	JNZ          loop4x16

	MOVQ    o0+48(FP), AX
	VMOVUPS Y0, (AX)
	VMOVUPS Y1, 32(AX)
	MOVQ    o1+56(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	MOVQ    o2+64(FP), AX
	VMOVUPS Y4, (AX)
	VMOVUPS Y5, 32(AX)
	MOVQ    o3+72(FP), AX
	VMOVUPS Y6, (AX)
	VMOVUPS Y7, 32(AX)
	VZEROUPPER
	RET

// func gemm1x64(x, p *float32, pstride, k int, o *float32)
// Four consecutive panels (pstride bytes apart) for one row: eight
// independent FMA chains.
TEXT ·gemm1x64(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ p+8(FP), DI
	MOVQ pstride+16(FP), R9
	LEAQ (DI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	MOVQ k+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop1x64:
	VBROADCASTSS (SI), Y10
	VFMADD231PS  (DI), Y10, Y0
	VFMADD231PS  32(DI), Y10, Y1
	VFMADD231PS  (R10), Y10, Y2
	VFMADD231PS  32(R10), Y10, Y3
	VFMADD231PS  (R11), Y10, Y4
	VFMADD231PS  32(R11), Y10, Y5
	VFMADD231PS  (R12), Y10, Y6
	VFMADD231PS  32(R12), Y10, Y7
	ADDQ         $4, SI
	ADDQ         $64, DI
	ADDQ         $64, R10
	ADDQ         $64, R11
	ADDQ         $64, R12
	DECQ         CX
	JNZ          loop1x64

	MOVQ    o+32(FP), AX
	VMOVUPS Y0, (AX)
	VMOVUPS Y1, 32(AX)
	VMOVUPS Y2, 64(AX)
	VMOVUPS Y3, 96(AX)
	VMOVUPS Y4, 128(AX)
	VMOVUPS Y5, 160(AX)
	VMOVUPS Y6, 192(AX)
	VMOVUPS Y7, 224(AX)
	VZEROUPPER
	RET

// func gemm1x16(x, p *float32, k int, o *float32)
TEXT ·gemm1x16(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ p+8(FP), DI
	MOVQ k+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

loop1x16:
	VBROADCASTSS (SI), Y10
	VFMADD231PS  (DI), Y10, Y0
	VFMADD231PS  32(DI), Y10, Y1
	ADDQ         $4, SI
	ADDQ         $64, DI
	DECQ         CX
	JNZ          loop1x16

	MOVQ    o+24(FP), AX
	VMOVUPS Y0, (AX)
	VMOVUPS Y1, 32(AX)
	VZEROUPPER
	RET
