//go:build !cgo

package gpu

const wantReasonPrefix = "unavailable: built without cgo"
