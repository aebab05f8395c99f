//go:build unix

package producer

import "syscall"

// offHeap returns size zeroed bytes outside the Go heap, mapped from the
// system, and the function that unmaps them; the bytes must not be used
// after it is called, and must never hold a pointer, which the collector
// would not see. Should the system refuse the mapping, they come from
// the Go heap instead.
func offHeap(size int) ([]byte, func()) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, size), func() {}
	}
	return b, func() { _ = syscall.Munmap(b) }
}
