//go:build !linux || android

package gpu

const wantReasonPrefix = reasonNotLinux
