//go:build !linux

package rawio

const supported = false

func readFD(uintptr, []byte) (int, bool, error)  { panic("rawio: unsupported") }
func writeFD(uintptr, []byte) (int, bool, error) { panic("rawio: unsupported") }
